"""What every population shares, whatever its algorithm: the members and their run directories,
the locks on them, the signal context, one RunContext per member, and the population summary.
An algorithm's population (population.py: PPO; offpolicy_population.py: SAC and TD3) adds its
graphs and its loop (``_loop``). A config the stacked graphs cannot train is trained by
:class:`SequentialPopulation`: the same directories, one member after another."""
from __future__ import annotations

import gc
import json
import os
import time
from contextlib import ExitStack
from typing import List, Optional

from msrl_consistent import checkpoint as ckpt
from msrl_consistent import runlock
from msrl_consistent.populations import population_summary
from msrl_consistent.run_context import RunContext, TrainingInterrupted
from msrl_consistent.signals import StopOnSignals

from .jobs import run_groups


class Population:
    """K members of one algorithm trained together in this process."""

    run_groups = staticmethod(run_groups)  # a population of J groups, one process each (``--jobs J``)

    def __init__(self, members: List, run_dirs: List[str], run_dir: str, whole: bool = True):
        """``whole`` False: these members are one group of the population in ``run_dir``, trained in
        a process of their own (populations.jobs), whose parent holds the population directory and
        writes its summary."""
        self.members, self.run_dirs, self.run_dir, self.whole = members, run_dirs, run_dir, whole
        self.k = len(members)
        self.stop_requested: Optional[int] = None

    def check_common_step(self) -> None:
        """Members that share graph calls step together: refuse members resumed from different steps."""
        counters = {tuple(m._counters().values()) for m in self.members}
        if len(counters) != 1:
            steps = ", ".join(f"{d}: step {m.num_timesteps}" for d, m in zip(self.run_dirs, self.members))
            raise ckpt.CheckpointError(f"the members of {self.run_dir} were checkpointed at different steps ({steps}); "
                                       f"a population resumes from one common step")

    def interrupt(self, runs: List[RunContext], signum: int) -> None:
        """Every member checkpoints the same step, then TrainingInterrupted names the population."""
        for run in runs:
            run.checkpoint_interrupted(signum)
        raise TrainingInterrupted(signum, self.run_dir)

    @classmethod
    def build(cls, configs: List, run_dirs: List[str], run_dir: str, resume: bool = False,
              whole: bool = True) -> "Population":
        """The population of these members, each built from its config or, with ``resume``, from its
        run directory's newest checkpoint."""
        from msrl_consistent import registry
        members = [registry.get(c.algorithm).resume(d) if resume else registry.get(c.algorithm)(c)
                   for c, d in zip(configs, run_dirs)]
        return cls(members, run_dirs, run_dir, whole)

    @classmethod
    def one_after_another(cls, reason: str) -> type:
        """The population that trains this algorithm's members one after another
        (:class:`SequentialPopulation`), for a config whose ``refusal`` is ``reason``."""
        return SequentialPopulation.of(cls, reason)

    def describe(self) -> str:
        m0 = self.members[0]
        return f"step {m0.num_timesteps} of {m0.cfg.total_timesteps}"

    def request_stop(self, signum: int) -> None:
        self.stop_requested = signum

    def learn(self, progress: bool = False) -> dict:
        """Train every member to its total_timesteps; returns the population summary (summary.json)."""
        t0 = time.perf_counter()
        with ExitStack() as stack:
            for d in [self.run_dir, *self.run_dirs] if self.whole else self.run_dirs:
                stack.enter_context(runlock.hold(d))
            signals = stack.enter_context(StopOnSignals(self.request_stop))
            runs = [RunContext(m, d, progress=progress and k == 0) for k, (m, d) in
                    enumerate(zip(self.members, self.run_dirs))]
            try:
                self._loop(runs, signals)
                self.before_finish()
                summaries = [run.finish() for run in runs]
            finally:
                for run in runs:
                    run.close()
        return population_summary(self.run_dir, self.run_dirs, [m.cfg.seed for m in self.members], summaries,
                                  time.perf_counter() - t0, write=self.whole)

    def _loop(self, runs: List[RunContext], signals) -> None:
        """Train until every member reaches its total_timesteps or a stop is requested."""
        raise NotImplementedError

    def before_finish(self) -> None:
        """Bring the members' own Parameters up to date before their final summaries (a population
        whose graphs train stacked copies)."""


class SequentialPopulation(Population):
    """A population whose members train one after another in this process, each by its single
    run's own code (``Algorithm.learn``): for a config the algorithm's stacked graphs cannot
    train (``reason``: images, a recurrent policy, gSDE, target_kl, ...). A member is then
    bit-identical to ``msrl train CONFIG --seed S`` with the same kernel-thread setting; what the
    population adds is one command, one directory, ``--resume``, ``msrl plot`` of the whole, and
    with ``--jobs J`` J members at a time (one kernel thread each). Members are built when their
    turn comes (one agent in memory at a time); a finished member (its summary.json) is skipped,
    an interrupted one resumes from its newest checkpoint."""

    reason = ""
    """Why the members are not stacked (set by :meth:`of`)."""

    sweepable = None
    """``--sweep`` takes any ``algo.`` key: each member is built from its own config."""

    @classmethod
    def of(cls, stacked: type, reason: str) -> type:
        """The sequential population of the algorithm whose stacked population is ``stacked``."""
        return type(f"Sequential{stacked.__name__}", (cls,), {"reason": reason})

    @classmethod
    def build(cls, configs: List, run_dirs: List[str], run_dir: str, resume: bool = False,
              whole: bool = True) -> "Population":
        return cls(configs, run_dirs, run_dir, whole)

    def __init__(self, configs: List, run_dirs: List[str], run_dir: str, whole: bool = True):
        super().__init__([], run_dirs, run_dir, whole)
        self.configs, self.k = configs, len(configs)
        self.current = None

    def describe(self) -> str:
        done = sum(os.path.isfile(os.path.join(d, "summary.json")) for d in self.run_dirs)
        return f"members one after another, {done} of {self.k} finished"

    def request_stop(self, signum: int) -> None:
        self.stop_requested = signum
        if self.current is not None:
            self.current.request_stop(signum)

    def learn(self, progress: bool = False) -> dict:
        from msrl_consistent import registry
        t0 = time.perf_counter()
        summaries = []
        with ExitStack() as stack:
            if self.whole:
                stack.enter_context(runlock.hold(self.run_dir))
            signals = stack.enter_context(StopOnSignals(self.request_stop))
            for cfg, d in zip(self.configs, self.run_dirs):
                done = os.path.join(d, "summary.json")
                if os.path.isfile(done):
                    with open(done) as fh:
                        summaries.append(json.load(fh))
                    continue
                if self.stop_requested is not None:  # between two members: the next one has not started
                    raise TrainingInterrupted(self.stop_requested, self.run_dir)
                algo_cls = registry.get(cfg.algorithm)
                started = ckpt.newest_intact(os.path.join(d, "checkpoints")) is not None
                self.current = algo_cls.resume(d) if started else algo_cls(cfg)
                try:
                    summaries.append(self.current.learn(d, progress))
                finally:
                    self.current = None
                    gc.collect()  # the member's graphs and buffers before the next one's
                    signals.reinstall()  # the member's own handlers were removed on its exit
        return population_summary(self.run_dir, self.run_dirs, [c.seed for c in self.configs], summaries,
                                  time.perf_counter() - t0, write=self.whole)
