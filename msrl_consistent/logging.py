"""Run logging: TensorBoard scalars (tbevents.EventFile), metrics.jsonl (one JSON object a line), progress bar."""
from __future__ import annotations

import json
import os
import sys
import time
from collections import deque
from typing import Dict, Optional

import numpy as np

from .tbevents import EventFile


class RunLogger:
    def __init__(self, run_dir: str, total_steps: int, tensorboard: bool = True, progress: bool = True,
                 window: int = 100, start_step: int = 0, enabled: bool = True):
        """``enabled=False`` (data-parallel ranks other than 0) writes nothing."""
        self.run_dir = run_dir
        self.metrics_path = os.path.join(run_dir, "metrics.jsonl")
        self._fh = open(self.metrics_path, "a", encoding="utf-8") if enabled else open(os.devnull, "w")
        self.writer: Optional[EventFile] = EventFile(os.path.join(run_dir, "tb")) if tensorboard and enabled else None
        self.returns = deque(maxlen=window)
        self.lengths = deque(maxlen=window)
        self.t0 = time.perf_counter()
        self.start_step = start_step
        self.bar = None
        if progress and enabled and sys.stdout.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total_steps, initial=start_step, unit="step", dynamic_ncols=True)
        self._bar_step = start_step

    def steps_per_second(self, step: int) -> float:
        dt = time.perf_counter() - self.t0
        return (step - self.start_step) / dt if dt > 0 else 0.0

    def episode(self, step: int, ret: float, length: int) -> None:
        self.returns.append(ret)
        self.lengths.append(length)
        if self.writer:
            self.writer.scalars(step, (("rollout/episode_return", ret), ("rollout/episode_length", length)))

    def mean_return(self) -> Optional[float]:
        return float(np.mean(self.returns)) if self.returns else None

    def scalars(self, step: int, values: Dict[str, float], kind: str = "train") -> None:
        record = {"kind": kind, "step": int(step), "time": round(time.perf_counter() - self.t0, 3)}
        record.update({k: _num(v) for k, v in values.items()})
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()
        if self.writer:
            self.writer.scalars(step, ((f"{kind}/{k}", v) for k, v in values.items()
                                       if isinstance(v, (int, float, np.floating, np.integer))))
            self.writer.flush_every(10.0)  # a TensorBoard watching the run sees it within seconds

    def event(self, step: int, **fields) -> None:
        record = {"kind": "event", "step": int(step)}
        record.update(fields)
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()

    def progress(self, step: int) -> None:
        if self.bar is None:
            return
        if self.bar.total is not None and step > self.bar.total:
            # The last rollout can overshoot total_timesteps (whole vector steps); tqdm drops a
            # total that n exceeds, so the bar's total becomes the real step count.
            self.bar.total = step
        self.bar.update(step - self._bar_step)
        self._bar_step = step
        mr = self.mean_return()
        self.bar.set_postfix({"sps": f"{self.steps_per_second(step):.0f}",
                              "return": "-" if mr is None else f"{mr:.1f}"}, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.writer:
            self.writer.close()
        self._fh.close()


def _num(v):
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    return v
