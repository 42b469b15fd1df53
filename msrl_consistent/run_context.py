"""The context of one training run: logging, periodic evaluation, checkpoints, the interrupt
and non-finite stops, per-rank status files, and the time spent per phase of the loop."""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Dict, Optional

import numpy as np

from msrl_consistent import checkpoint as ckpt
from msrl_consistent.config import dump_config
from msrl_consistent.episodes import EvaluationStopped
from msrl_consistent.logging import RunLogger


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM during training: a checkpoint was written, exit 130 or 143."""

    def __init__(self, signum: int, checkpoint: str):
        super().__init__(f"interrupted by signal {signum}; checkpoint {checkpoint}")
        self.signum = signum
        self.checkpoint = checkpoint
        self.exit_code = 128 + signum


class TrainingStopped(RuntimeError):
    """A check stopped training; ``exit_code`` is the command's."""

    exit_code = 1


class NonFiniteError(TrainingStopped):
    """A non-finite loss, gradient or parameter: training stops, the last good checkpoint stays."""


class MismatchError(TrainingStopped):
    """The rollout/update mismatch exceeded ``log.mismatch_threshold`` with ``log.mismatch_action:
    stop``: training stops after a checkpoint of the step (a usage decision: exit 2)."""

    exit_code = 2


class RunContext:
    """Logging, periodic evaluation and checkpointing around a learn loop."""

    def __init__(self, algo, run_dir: str, progress: bool):
        self.algo = algo
        self.cfg = algo.cfg
        self.run_dir = run_dir
        self.ckpt_dir = os.path.join(run_dir, "checkpoints")
        os.makedirs(self.ckpt_dir, exist_ok=True)
        self.main = algo.dist.is_main  # rank 0 alone writes logs, metrics and checkpoints
        config_path = os.path.join(run_dir, "config.yaml")
        if self.main and not os.path.isfile(config_path):
            # learn() called from Python on a fresh directory: write the resolved config too, so the
            # directory is a complete run directory (eval, export, load_policy and --resume read it).
            ckpt.atomic_write_text(config_path, dump_config(self.cfg))
        self.logger = RunLogger(run_dir, self.cfg.total_timesteps, self.cfg.log.tensorboard, progress,
                                self.cfg.log.window, start_step=algo.num_timesteps, enabled=self.main)
        if algo.resumed_from:
            self.logger.event(algo.num_timesteps, event="resumed", checkpoint=algo.resumed_from)
        if algo.dist.enabled:  # ranks/<rank>.json: running (with the pid), then the final results
            self.write_rank_status("running")
        self.t_start = time.perf_counter()
        self.startup_s = _process_age()
        """Seconds from the process start to the start of the loop (imports, env and network construction)."""
        self.first_update_s: Optional[float] = None
        """Wall time of the first update (graph compilation included); the loops set it."""
        self.phases: Dict[str, float] = {"update": 0.0, "acting": 0.0, "env": 0.0, "eval": 0.0, "log": 0.0}
        """Seconds spent per phase of the loop (the loops add to them; summary.json reports them)."""
        self.next_eval = self._next_multiple(self.cfg.eval.freq)
        self.next_ckpt = self._next_multiple(self.cfg.checkpoint.freq)
        self.mismatch: Dict[str, float] = {}
        """The run's maximum of each rollout/update mismatch figure (summary.json's ``mismatch``)."""
        self._mismatch_warned = False

    def _next_multiple(self, freq: int) -> Optional[int]:
        if freq <= 0:
            return None
        return (self.algo.num_timesteps // freq + 1) * freq

    def update_done(self, seconds: float) -> None:
        """Add one update's wall time to the phase timers (the first one, graph compilation
        included, is also kept apart as first_update_s)."""
        self.phases["update"] += seconds
        if self.first_update_s is None:
            self.first_update_s = seconds

    def episode_done(self, ret: float, length: int) -> None:
        self.logger.episode(self.algo.num_timesteps, ret, length)

    def after_iteration(self, stats: Dict[str, float]) -> None:
        """Log training stats; evaluate and checkpoint when their step multiples are crossed."""
        algo = self.algo
        t0 = time.perf_counter()
        step = algo.num_timesteps
        stats = dict(stats)
        stats["steps_per_second"] = self.logger.steps_per_second(step)
        mr = self.logger.mean_return()
        if mr is not None:
            stats["recent_mean_return"] = mr
        self.check_finite(step, stats)
        self.logger.scalars(step, stats, "train")
        self.check_mismatch(step, stats)
        self.logger.progress(step)
        self.phases["log"] += time.perf_counter() - t0
        if self.next_eval is not None and step >= self.next_eval and step < self.cfg.total_timesteps:
            if self.main:
                self.evaluate()
            self.next_eval = self._next_multiple(self.cfg.eval.freq)
        if self.next_ckpt is not None and step >= self.next_ckpt and step < self.cfg.total_timesteps:
            self.save_periodic(step)
            self.next_ckpt = self._next_multiple(self.cfg.checkpoint.freq)
        stop = algo.stop_requested
        if algo.dist.enabled:  # every rank stops at the same step, whichever rank got the signal
            stop = algo.dist.max_int(stop or 0) or None
        if stop is not None:
            self.interrupt(stop)
        if algo.signals is not None:
            algo.signals.reinstall()  # MindSpore replaced the SIGINT handler during the graph calls

    def _stop_signal(self) -> Optional[int]:
        """The signal asking this run to stop, if any (the handler re-installed first: MindSpore's
        graph calls replace the SIGINT handler)."""
        if self.algo.signals is not None:
            self.algo.signals.reinstall()
        return self.algo.stop_requested

    def save_periodic(self, step: int) -> str:
        """Checkpoint at ``step``. Data parallel: every other rank first writes its own state
        (RNG streams, replay buffer) beside it (checkpoint.rank_path), then rank 0 the checkpoint,
        so a checkpoint that exists has its ranks' files; every rank returns once all are written."""
        path = os.path.join(self.ckpt_dir, f"step-{step:09d}.safetensors")
        dist = self.algo.dist
        if dist.enabled and not self.main:
            self.algo.save_rank_state(ckpt.rank_path(path, dist.rank))
        if dist.enabled:
            dist.barrier()
        if self.main:
            self.algo.save(path)
            ckpt.prune(self.ckpt_dir, self.cfg.checkpoint.keep)
        if dist.enabled:
            dist.barrier()
        return path

    def interrupt(self, signum: int) -> None:
        raise TrainingInterrupted(signum, self.checkpoint_interrupted(signum))

    def checkpoint_interrupted(self, signum: int) -> str:
        """The checkpoint of an interruption at this step, its ``interrupted`` event (and rank
        status); returns the checkpoint's path."""
        step = self.algo.num_timesteps
        path = self.save_periodic(step)
        self.logger.event(step, event="interrupted", signal=int(signum), checkpoint=path)
        if self.algo.dist.enabled:
            self.write_rank_status("interrupted", signal=int(signum), checkpoint=path,
                                   params_sha256=self.algo.params_hash())
        return path

    def check_finite(self, step: int, stats: Dict[str, float]) -> None:
        """Stop on a non-finite loss, gradient norm or parameter, before anything is saved."""
        for k, v in stats.items():
            if ("loss" in k or "grad" in k) and isinstance(v, float) and not np.isfinite(v):
                self.logger.event(step, event="non_finite", quantity=k)
                raise NonFiniteError(f"non-finite {k} ({v}) at step {step}; training stopped, the last good "
                                     f"checkpoint in {self.ckpt_dir} is kept")
        for k, v in self.algo.parameters().items():
            if not np.all(np.isfinite(v)):
                self.logger.event(step, event="non_finite", quantity=f"parameter {k}")
                raise NonFiniteError(f"non-finite parameter {k} at step {step}; training stopped, the last good "
                                     f"checkpoint in {self.ckpt_dir} is kept")

    def check_mismatch(self, step: int, stats: Dict[str, float]) -> None:
        """Keep the run's maximum of each ``mismatch_*`` figure and act on ``log.mismatch_threshold``
        (compared with ``mismatch_max``): warn once on stderr (every time: an event in metrics.jsonl),
        or checkpoint this step and stop (MismatchError). Data parallel: the ranks stop together
        when any rank's figure is over."""
        figures = {k[len("mismatch_"):]: v for k, v in stats.items() if k.startswith("mismatch_")}
        for k, v in figures.items():
            self.mismatch[k] = max(self.mismatch.get(k, float(v)), float(v))
        lc, algo = self.cfg.log, self.algo
        if lc.mismatch_threshold is None or "max" not in figures:
            return
        over = figures["max"] > lc.mismatch_threshold
        stop = lc.mismatch_action == "stop"
        if stop and algo.dist.enabled:
            over = bool(algo.dist.max_int(int(over)))
        if not over:
            return
        self.logger.event(step, event="mismatch", value=float(figures["max"]), threshold=lc.mismatch_threshold)
        what = (f"{self.run_dir}: rollout/update mismatch {figures['max']:.3g} (max |delta|) above "
                f"log.mismatch_threshold {lc.mismatch_threshold:g} at step {step}")
        if stop:
            raise MismatchError(f"{what}; training stopped, checkpoint {self.save_periodic(step)}")
        if not self._mismatch_warned and self.main:
            print(f"msrl: warning: {what} (each one is an event in metrics.jsonl)", file=sys.stderr)
            self._mismatch_warned = True

    def evaluate(self) -> dict:
        """The evaluation episodes (``eval.max_steps`` caps each, recorded with the results); a
        SIGINT/SIGTERM during them abandons them at the next step and interrupts the run as
        during training (one process: a data-parallel run's ranks stop together at a training step)."""
        t0 = time.perf_counter()
        algo, cap = self.algo, self.cfg.eval.max_steps
        step = algo.num_timesteps
        stop = None if algo.dist.enabled else self._stop_signal
        try:
            returns, lengths = algo.evaluate(self.cfg.eval.episodes, self.cfg.seed + self.cfg.eval.seed_offset, cap, stop)
        except EvaluationStopped as exc:
            self.phases["eval"] += time.perf_counter() - t0
            self.interrupt(exc.signum)
        res = {"mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
               "mean_length": float(np.mean(lengths))}
        if cap is not None:
            res.update(max_steps=float(cap), capped=float(np.sum(np.asarray(lengths) >= cap)))
        self.logger.scalars(step, res, "eval")
        self.phases["eval"] += time.perf_counter() - t0
        return res

    def finish(self) -> dict:
        algo = self.algo
        wall = time.perf_counter() - self.t_start
        summary = {
            "algorithm": algo.name, "env": self.cfg.env.id, "seed": self.cfg.seed,
            "num_timesteps": algo.num_timesteps, "wall_time_s": round(wall, 3),
            "steps_per_second": round(self.logger.steps_per_second(algo.num_timesteps), 2),
            "params_sha256": algo.params_hash(),
        }
        if algo.num_timesteps != self.cfg.total_timesteps:
            summary["total_timesteps"] = self.cfg.total_timesteps  # the loop trains whole rollouts or vector steps
        summary["n_updates"] = algo.n_updates
        summary["startup_s"] = None if self.startup_s is None else round(self.startup_s, 3)
        summary["first_update_s"] = None if self.first_update_s is None else round(self.first_update_s, 3)
        summary["phase_seconds"] = {k: round(v, 3) for k, v in self.phases.items()}
        summary["phase_seconds"]["other"] = round(wall - sum(self.phases.values()), 3)
        summary["env_recipe"] = algo.env_recipe
        if self.mismatch:
            summary["mismatch"] = dict(sorted(self.mismatch.items()))
        if algo.dist.enabled:
            summary["distributed"] = algo.dist.describe()
            self.write_rank_status("finished", **summary)
        if not self.main:
            return summary
        summary["final_eval"] = self.evaluate()
        algo.save(os.path.join(self.ckpt_dir, "final.safetensors"))
        self.logger.event(algo.num_timesteps, event="finished", **summary)
        ckpt.atomic_write_text(os.path.join(self.run_dir, "summary.json"), json.dumps(summary, indent=2) + "\n")
        return summary

    def write_rank_status(self, status: str, **fields) -> None:
        """ranks/<rank>.json: this rank, its world, host and pid, ``status`` and ``fields``."""
        dist = self.algo.dist
        info = dict(fields, rank=dist.rank, world=dist.world, host=socket.gethostname(), pid=os.getpid(),
                    status=status)
        os.makedirs(os.path.join(self.run_dir, "ranks"), exist_ok=True)
        ckpt.atomic_write_text(os.path.join(self.run_dir, "ranks", f"{dist.rank}.json"),
                               json.dumps(info, indent=2) + "\n")

    def close(self) -> None:
        self.logger.close()


def _process_age() -> Optional[float]:
    """Seconds since this process started (Linux /proc), or None elsewhere."""
    try:
        with open("/proc/self/stat") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError, AttributeError):
        return None
