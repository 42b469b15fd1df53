"""A population trained as J groups of members, one process per group (``msrl train CONFIG
--seeds 0-4 --jobs 2``, ``msrl_consistent.train(..., seeds=[...], jobs=2)``).

One population process keeps one core busy most of the time (its graph calls are many small
kernels, its environments and bookkeeping are Python); a second core is left for another
process. With ``--jobs J`` the members are split into J contiguous groups (sizes as even as
possible, the larger first), recorded in ``population.json`` as ``groups``; each group is an
ordinary population (population.py) in its own process with one kernel thread,
pinned to its own core where there are enough, so the J processes do not fight over the cores.
The parent holds the population directory's lock, forwards SIGINT and SIGTERM to the groups
(each checkpoints its members and exits 130 / 143) and writes the population's summary.json
once every group finished.

A member's parameters depend on the members it is stacked with (its group) and on the kernel
thread count (BatchMatMul splits the members' rows between threads): the same population config
and ``--jobs`` give the same sha256 per member, and a group's members are bit-identical to a
population of just those members trained with one kernel thread (docs/populations.md).

A group's process runs ``GROUP_PROCESS``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Dict, List, Sequence

from msrl_consistent.config import ConfigError
from msrl_consistent.populations import (
    GroupFailed,
    group_finished,
    population_class,
    population_groups,
    population_members,
    population_summary,
    read_population,
)
from msrl_consistent.run_context import TrainingInterrupted, TrainingStopped

GROUP_THREADS = 1
"""MindSpore kernel threads per group process: J single-threaded processes on J cores."""


def _stop_with_parent(parent: int) -> None:
    """In a group process: SIGTERM when the parent dies, so a killed launcher's groups still
    checkpoint and stop (Linux's PR_SET_PDEATHSIG; elsewhere nothing is done)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request was made
        os.kill(os.getpid(), signal.SIGTERM)


def run_groups(run_dir: str, resume: bool, progress: bool = False) -> dict:
    """Train the unfinished groups of ``run_dir`` in one process each; returns the population summary
    (written to summary.json). TrainingInterrupted when a signal stopped them (every member
    checkpointed), GroupFailed when a group ended with an error (the others are stopped)."""
    from msrl_consistent import runlock
    from msrl_consistent.signals import StopOnSignals

    t0 = time.perf_counter()
    groups = population_groups(run_dir)
    todo = [j for j, g in enumerate(groups) if not group_finished(run_dir, g)]
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    stopping: Dict[str, int] = {}
    with runlock.hold(run_dir):
        procs: List[subprocess.Popen] = []

        def forward(signum: int) -> None:
            stopping.setdefault("signal", signum)
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signum)

        with StopOnSignals(forward) as signals:
            for n, j in enumerate(todo):
                core = cores[n] if len(cores) >= len(todo) else -1
                cmd = [sys.executable, "-c", GROUP_PROCESS, os.path.abspath(run_dir), str(j), "--core", str(core),
                       "--parent", str(os.getpid())]
                cmd += (["--resume"] if resume else []) + (["--progress"] if progress and n == 0 else [])
                # a session of its own: a terminal's Ctrl-C reaches the parent, which forwards it once
                procs.append(subprocess.Popen(cmd, start_new_session=True))
            codes = [None] * len(procs)
            while any(c is None for c in codes):
                for i, p in enumerate(procs):
                    if codes[i] is None and p.poll() is not None:
                        codes[i] = p.returncode
                        if codes[i] != 0 and group_finished(run_dir, groups[todo[i]]):
                            codes[i] = 0  # a signal after its members had finished (their summaries are written)
                        if codes[i] not in (0, 130, 143) and "failed" not in stopping:
                            stopping["failed"] = i
                            forward(signal.SIGTERM)
                time.sleep(0.05)
                signals.reinstall()
    if "failed" in stopping:
        i = stopping["failed"]
        dirs = population_members(run_dir)
        names = ", ".join(os.path.basename(dirs[m]) for m in groups[todo[i]])
        others = "; the other groups were stopped and checkpointed" if len(todo) > 1 else ""
        raise GroupFailed(f"{run_dir}: group {todo[i]} ({names}) exited with code {codes[i]} (its message is "
                          f"above){others}; once the cause is fixed: msrl train --resume {run_dir}",
                          codes[i] if codes[i] > 0 else 1)
    if any(c != 0 for c in codes):
        raise TrainingInterrupted(stopping.get("signal") or next(c for c in codes if c) - 128, run_dir)
    from msrl_consistent.config import load_config
    dirs = population_members(run_dir)
    summaries = []
    for d in dirs:  # the members' own summary.json files
        with open(os.path.join(d, "summary.json")) as fh:
            summaries.append(json.load(fh))
    return population_summary(run_dir, dirs, [load_config(os.path.join(d, "config.yaml")).seed for d in dirs],
                              summaries, time.perf_counter() - t0, groups=groups)


GROUP_PROCESS = """
import os, sys
from msrl_consistent.signals import watch_sigint
watch_sigint()  # before MindSpore starts its threads (signals.py)
core = int(sys.argv[sys.argv.index("--core") + 1])
if core >= 0:
    os.sched_setaffinity(0, {core})  # MindSpore's threads, started later, inherit it
from msrl_consistent.populations.jobs import group_main
sys.exit(group_main(sys.argv[1:]))
"""
"""A group's process (``python -c GROUP_PROCESS RUN_DIR GROUP --core C [--resume] [--progress]
[--parent PID]``): the SIGINT watcher and the core are set before anything imports MindSpore."""


def group_main(argv: Sequence[str]) -> int:
    """One group's process: its members, fresh or from their checkpoints, trained as a population."""
    import argparse

    p = argparse.ArgumentParser(prog="population group")
    p.add_argument("run_dir")
    p.add_argument("group", type=int)
    p.add_argument("--core", type=int, default=-1)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--progress", action="store_true")
    p.add_argument("--parent", type=int, default=0)
    args = p.parse_args(argv)
    if args.parent:
        _stop_with_parent(args.parent)
    groups = population_groups(args.run_dir)
    import mindspore as ms
    ms.set_context(runtime_num_threads=GROUP_THREADS)

    from msrl_consistent.checkpoint import CheckpointError
    from msrl_consistent.config import load_config
    try:
        every = population_members(args.run_dir)
        dirs = [every[i] for i in groups[args.group]]
        configs = [load_config(os.path.join(d, "config.yaml")) for d in dirs]
        cls = population_class(configs[0], sorted({c.seed for c in configs}),  # a sweep repeats its seeds
                               sweep=list(read_population(args.run_dir).get("sweep", {})))
        cls.build(configs, dirs, args.run_dir, resume=args.resume, whole=False).learn(args.progress)
    except TrainingInterrupted as exc:
        return exc.exit_code
    except TrainingStopped as exc:
        print(f"msrl: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (ConfigError, CheckpointError) as exc:
        print(f"msrl: error: {exc}", file=sys.stderr)
        return 2
    return 0

