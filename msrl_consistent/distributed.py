"""Data-parallel training on MindSpore's own distributed engine (msrun; HCCL on Ascend, the
CPU collective backend on this machine).

``msrl train CONFIG --workers N`` re-launches itself through ``msrun`` with N workers. Each
worker calls ``mindspore.communication.init()``; ranks step their own vector envs seeded from
(seed, rank); gradients are averaged inside the compiled update step with
``nn.DistributedGradReducer`` so parameters stay identical on every rank; observation
normalization statistics are gathered from all ranks and merged in rank order (identical on
every rank); rank 0 alone writes checkpoints, logs and metrics, and every rank writes
``ranks/<rank>.json`` with its final parameter sha256, steps and steps/s.

Several hosts (cluster.py, docs/distributed.md): ``--nodes M --node-rank R --master-addr HOST``
on every node; each launcher runs msrun for its own N/M workers and looks after those ranks only.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional

import numpy as np

from .cluster import Cluster, launched, msrun_prefix
from .runlock import held_env

WORKER_ENV = "MSRL_WORKER"


@dataclass
class Dist:
    rank: int = 0
    world: int = 1

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def allgather(self, arr: np.ndarray) -> np.ndarray:
        """Every rank's ``arr`` stacked in rank order, shape (world, *arr.shape), float32."""
        if not self.enabled:
            return np.asarray(arr, np.float32)[None]
        from mindspore import Tensor
        flat = np.asarray(arr, np.float32).reshape(1, -1)
        out = _gather_cell()(Tensor(flat)).asnumpy()
        return out.reshape((self.world,) + np.shape(arr))

    def max_int(self, value: int) -> int:
        """The largest of every rank's ``value`` (a collective: every rank calls it at the same point).
        A stop signal seen by one rank becomes every rank's at the same step, so no rank is
        left alone in a collective."""
        return int(self.allgather(np.array([value], np.float32)).max())

    def describe(self) -> dict:
        """The launch behind this run, for summary.json: ranks, hosts, the writer's node and the
        settings that make the collectives deterministic (set before ``communication.init()``)."""
        import mindspore as ms
        c = launched() or {"workers": self.world, "nodes": 1}
        local = max(int(c["workers"]) // max(int(c["nodes"]), 1), 1)
        return {"workers": self.world, "nodes": int(c["nodes"]), "local_workers": local,
                "node_rank": self.rank // local, "master_addr": c.get("master_addr"),
                "master_port": c.get("master_port"), "deterministic": ms.get_context("deterministic"),
                "env": {k: os.environ.get(k) for k in DETERMINISM_ENV}}

    def barrier(self) -> None:
        """Return once every rank has reached this point (files written before it are complete)."""
        self.allgather(np.zeros(1, np.float32))


_GATHER = {}


def _gather_cell():
    if "cell" not in _GATHER:
        from mindspore import nn, ops

        class AllGather(nn.Cell):
            def __init__(self):
                super().__init__()
                self.gather = ops.AllGather()

            def construct(self, x):
                return self.gather(x)

        _GATHER["cell"] = AllGather()
    return _GATHER["cell"]


_DIST = {"dist": Dist()}


def current() -> Dist:
    return _DIST["dist"]


def init_if_worker() -> Dist:
    """In an msrun worker (MSRL_WORKER set by the launcher): init communication, return the rank."""
    if not os.environ.get(WORKER_ENV):
        return _DIST["dist"]
    from mindspore.communication import get_group_size, get_rank, init
    init()
    _DIST["dist"] = Dist(rank=int(get_rank()), world=int(get_group_size()))
    return _DIST["dist"]


def msrun_command(entry: str, entry_args: List[str], workers: int, master_port: int, log_dir: str,
                  local_workers: Optional[int] = None, master_addr: str = "127.0.0.1", node_rank: int = 0,
                  msrun: str = "msrun") -> List[str]:
    """The msrun command line (one node of a possibly multi-node launch)."""
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    return [msrun, f"--worker_num={workers}", f"--local_worker_num={local_workers or workers}",
            f"--master_addr={master_addr}", f"--master_port={master_port}", f"--node_rank={node_rank}",
            f"--log_dir={log_dir}", "--join=True", "--cluster_time_out=120", entry] + list(entry_args)


ENTRY = """import os
import sys
# msrun starts its workers as `python THIS_FILE ...`, with whatever `python` comes first on PATH;
# the launcher puts its own interpreter's directory first, and this re-executes that interpreter
# (same pid) should another installation's run this file anyway.
PYTHON, PREFIX = {python!r}, {prefix!r}
if sys.prefix != PREFIX and os.path.isfile(PYTHON):
    os.execv(PYTHON, [PYTHON] + sys.argv)
from msrl_consistent.entry import main
sys.exit(main())
"""


def entry_script(python: str = sys.executable, prefix: str = sys.prefix) -> str:
    """The text of ``.msrun_entry.py``: ``msrl`` under the interpreter ``python`` (of the
    installation ``prefix``)."""
    return ENTRY.format(python=python, prefix=prefix)


def find_msrun() -> str:
    """The msrun of the running interpreter's installation (a venv's, even when it is not
    activated; for a venv with ``--system-site-packages``, the base installation's, beside the
    mindspore it imports), else the first on PATH."""
    for bindir in (os.path.dirname(sys.executable), os.path.join(sys.base_prefix, "bin")):
        candidate = os.path.join(bindir, "msrun")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    exe = shutil.which("msrun")
    if exe is None:
        raise FileNotFoundError("msrun (installed with mindspore) is not on PATH")
    return exe


def worker_env(environ=None, python: str = sys.executable) -> dict:
    """The environment of msrun and its workers: MSRL_WORKER set, ``HCCL_DETERMINISTIC=true``
    (unless ``strict``: HCCL's all-reduce in a fixed order, so every rank of every node adds
    the same numbers in the same order), and the directory of the launching interpreter first
    on PATH (msrun runs `python` from PATH, which in a shell where the venv is not activated is
    another interpreter, without msrl_consistent)."""
    env = dict(os.environ if environ is None else environ)
    env[WORKER_ENV] = "1"
    if env.get("HCCL_DETERMINISTIC") != "strict":  # HCCL's reduction order fixed (read on Ascend only)
        env["HCCL_DETERMINISTIC"] = "true"
    bindir = os.path.dirname(os.path.abspath(python))
    env["PATH"] = os.pathsep.join([bindir] + [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bindir])
    return env


DETERMINISM_ENV = ("HCCL_DETERMINISTIC", "TE_PARALLEL_COMPILER")
"""The environment that ``mindspore.set_deterministic(True)`` and worker_env set for deterministic
collectives and kernel compilation (recorded in summary.json)."""

MSRUN_LOG = "msrun.log"
"""msrun's own output (stdout and stderr), in the log directory beside the worker logs."""
_MSRUN_EXIT = re.compile(r"Worker process (\d+) exit with exception\. Error code: (-?\d+)")


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _statuses(ranks_dir: Optional[str]) -> List[dict]:
    """The readable ranks/<rank>.json files (each worker writes its pid there when it starts
    training, then its final or interrupted status)."""
    out = []
    for path in sorted(glob.glob(os.path.join(ranks_dir, "*.json"))) if ranks_dir else []:
        try:
            with open(path) as fh:
                out.append(json.load(fh))
        except (OSError, ValueError):
            continue
    return out


def _rank_pids(ranks_dir: Optional[str], ranks: Optional[Iterable[int]] = None) -> Dict[int, int]:
    """pid -> rank from ranks/<rank>.json, of the ``ranks`` given (this node's: another node's
    pids are another host's), else of every rank."""
    out = {}
    keep = None if ranks is None else set(ranks)
    for info in _statuses(ranks_dir):
        try:
            if keep is None or int(info["rank"]) in keep:
                out[int(info["pid"])] = int(info["rank"])
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _traceback_error(text: str) -> Optional[str]:
    """The last error line of a worker log that holds a Python traceback, or its one-line
    ``msrl: error:`` (a check that failed in the worker), else None."""
    refused = re.findall(r"^msrl: error: (.+)$", text, re.M)
    if refused:
        return refused[-1].strip()
    if "Traceback (most recent call last)" not in text and "WorkerDied" not in text:
        return None
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("[WARNING]")
             and not ln.startswith("[INFO]")]
    err = next((ln for ln in reversed(lines) if re.match(r"^\w*(Error|Exception|SystemExit|KeyboardInterrupt)", ln)),
               lines[-1] if lines else "")
    return err.strip()


def failed_ranks(log_dir: str, ranks_dir: Optional[str] = None, ranks: Optional[Iterable[int]] = None) -> List[dict]:
    """The failed ranks, the one that failed first at the head: ``{"rank", "error"}``.

    msrun polls its workers and, as soon as one exits non-zero, SIGKILLs all the others, so
    the failure is read in this order: (1) msrun's own report of the first worker it saw exit
    (``msrun.log``: pid and exit code; the pid is mapped to the rank through
    ``ranks_dir/<rank>.json``); (2) worker logs holding a Python traceback; (3) only when
    neither names a rank, the scheduler's heartbeat time-out. The scheduler alone cannot tell
    the worker that died from the ones msrun killed right after it (every one of them stops
    sending heartbeats within about a second, and the scheduler reports whichever lapses
    first), so on one host it is never the first source. Several hosts: ``ranks`` are this
    node's (the ones this log directory's msrun started); node 0's scheduler naming another
    node's rank as timed out comes first (its own msrun killed it and this node's workers
    then failed in a collective: their errors are consequences).
    """
    worker_errors = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "worker_*.log"))):
        m = re.search(r"worker_(\d+)\.log$", path)
        err = _traceback_error(open(path, "r", errors="replace").read())
        if err is not None:
            worker_errors[int(m.group(1))] = err
    out = []
    msrun_log = os.path.join(log_dir, MSRUN_LOG)
    if os.path.isfile(msrun_log):
        pids = _rank_pids(ranks_dir, ranks)
        m = _MSRUN_EXIT.search(open(msrun_log, "r", errors="replace").read())
        if m and int(m.group(1)) in pids:
            rank, code = pids[int(m.group(1))], int(m.group(2))
            detail = worker_errors.pop(rank, None)
            out.append({"rank": rank, "error": f"exited first ({_exit_text(code)})" + (f": {detail}" if detail else "")})
    out += [{"rank": r, "error": e} for r, e in sorted(worker_errors.items())]
    sched = os.path.join(log_dir, "scheduler.log")
    text = open(sched, "r", errors="replace").read() if os.path.isfile(sched) else ""
    timed_out = sorted({int(x) for x in re.findall(r"The node: (\d+) is timed out", text)})
    away = [r for r in timed_out if ranks is not None and r not in ranks]
    if away:
        return [{"rank": r, "error": "the worker stopped responding (on another node: that node's launcher and "
                                     "msrun_logs/node<N>/ name the cause)"} for r in away] + out
    if not out:
        out = [{"rank": r, "error": "the worker stopped responding (killed, or crashed without a Python error)"}
               for r in timed_out]
    return out


class _Forwarder:
    """The launcher's SIGINT/SIGTERM/SIGHUP handler: the signal goes to every worker (msrun starts
    them in their own sessions, and on SIGINT would SIGKILL them), as SIGTERM, once per worker pid
    as the pids appear in ranks/<rank>.json; the workers agree on the step, checkpoint and exit.
    A SIGKILL of the launcher cannot be forwarded: its workers go on (their pids are in ranks/)."""

    def __init__(self, ranks_dir: str, ranks: Optional[Iterable[int]] = None):
        self.ranks_dir = ranks_dir
        self.ranks = ranks  # this node's (another node's pids are another host's)
        self.signum: Optional[int] = None
        self.sent: set = set()

    def __call__(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum
        self.forward()

    def forward(self) -> None:
        if self.signum is None:
            return
        for pid in _rank_pids(self.ranks_dir, self.ranks):
            if pid not in self.sent:
                self.sent.add(pid)
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass


def launch(entry_args: List[str], cluster: Cluster, run_dir: str) -> int:
    """Run msrun with this node's workers executing ``msrl <entry_args>``; non-zero exit names
    the failed rank(s) and where their logs are. SIGINT/SIGTERM/SIGHUP are forwarded to this
    node's workers, which agree on the step with every other node's and checkpoint there: then
    every node's launcher exits 128 + the signal."""
    msrun = find_msrun()
    log_dir = cluster.log_dir(run_dir)
    ranks_dir = os.path.join(run_dir, "ranks")
    os.makedirs(log_dir, exist_ok=True)
    for r in cluster.ranks:  # a resumed launch: the pids are new
        if os.path.isfile(os.path.join(ranks_dir, f"{r}.json")):
            os.unlink(os.path.join(ranks_dir, f"{r}.json"))
    entry = os.path.join(run_dir if cluster.nodes == 1 else log_dir, ".msrun_entry.py")
    with open(entry, "w") as fh:
        fh.write(entry_script())
    cmd = msrun_command(entry, entry_args, cluster.workers, cluster.master_port, log_dir,
                        local_workers=cluster.local_workers, master_addr=cluster.master_addr,
                        node_rank=cluster.node_rank)
    cmd = msrun_prefix(cluster, msrun, sys.executable) + cmd[1:]
    msrun_log = os.path.join(log_dir, MSRUN_LOG)
    fwd = _Forwarder(ranks_dir, cluster.ranks)
    # SIGHUP too: msrun's own session does not see the terminal close
    saved = {sig: signal.signal(sig, fwd) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        with open(msrun_log, "w") as fh:
            # the launcher holds the run directory's lock for its workers (runlock); msrun in its own
            # session, so a terminal's Ctrl+C reaches the launcher alone
            env = held_env(run_dir, dict(worker_env(), **cluster.env()))
            proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
            while proc.poll() is None:
                fwd.forward()  # workers that wrote their pid after the signal came
                time.sleep(0.2)
    finally:
        for sig, h in saved.items():
            signal.signal(sig, h)
    # this node's ranks all checkpointed on a signal: this launcher's, or another node's (the
    # ranks agree on the largest signal any rank saw)
    done = [st for st in _statuses(ranks_dir) if st.get("status") == "interrupted" and st.get("rank") in cluster.ranks]
    if len(done) == cluster.local_workers and (fwd.signum is not None or proc.returncode == 0):
        signum = fwd.signum or int(done[0].get("signal", signal.SIGTERM))
        print(f"msrl: interrupted (signal {signum}); every rank checkpointed at {done[0]['checkpoint']}; "
              f"continue with: msrl train --resume {run_dir} {' '.join(cluster.flags())}", file=sys.stderr)
        return 128 + signum
    if proc.returncode == 0:
        return 0
    bad = failed_ranks(log_dir, ranks_dir, cluster.ranks)
    if bad:
        # the first entry is the cause; the others are usually its consequences (a collective
        # that lost its peer), reported as such
        detail = "; ".join([f"rank {bad[0]['rank']} failed: {bad[0]['error']}"]
                           + [f"rank {b['rank']} also reported: {b['error']}" for b in bad[1:]])
    else:
        lines = [ln for ln in open(msrun_log, errors="replace").read().splitlines() if ln.strip()]
        detail = lines[-1].strip() if lines else f"msrun exit code {proc.returncode}"
    print(f"msrl: error: distributed training failed: {detail} (logs: {log_dir})", file=sys.stderr)
    return 1
