"""What every population shares, whatever its algorithm: the members and their run directories,
the locks on them, the signal context, one RunContext per member, and the population summary.
An algorithm's population (population.py: PPO; offpolicy_population.py: SAC and TD3) adds its
graphs and its loop (``_loop``)."""
from __future__ import annotations

import time
from contextlib import ExitStack
from typing import List, Optional

from msrl_consistent import runlock
from msrl_consistent.populations import population_summary
from msrl_consistent.signals import StopOnSignals

from .population_jobs import run_groups
from .run import RunContext


class Population:
    """K members of one algorithm trained together in this process."""

    run_groups = staticmethod(run_groups)  # a population of J groups, one process each (``--jobs J``)

    def __init__(self, members: List, run_dirs: List[str], run_dir: str, whole: bool = True):
        """``whole`` False: these members are one group of the population in ``run_dir``, trained in
        a process of their own (population_jobs.py), whose parent holds the population directory and
        writes its summary."""
        self.members, self.run_dirs, self.run_dir, self.whole = members, run_dirs, run_dir, whole
        self.k = len(members)
        self.stop_requested: Optional[int] = None

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
