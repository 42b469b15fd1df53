"""The guarded policy: every action checked and timed, a fallback backend on a violation."""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Optional

import numpy as np

from .errors import GuardError, _one_line


class Guard:
    """Checks every action (finite, inside the action space, the right shape), times every call
    against an optional budget, and answers a violation or a backend exception with the fallback
    policy (another artifact of the same export), or raises GuardError when there is none.

    A call over the latency budget is counted and its action, valid but late, is returned (a
    control loop cannot wait for a second backend); after ``switch_after`` consecutive
    over-budget calls (default 3) the fallback, if any, serves every later call
    (``stats()["switched_to_fallback"]``). ``switch_after=0`` only counts.
    """

    KINDS = ("exception", "shape", "nonfinite", "out_of_range", "latency")

    def __init__(self, fallback: Any = None, latency_budget_ms: Optional[float] = None,
                 switch_after: int = 3, keep: int = 100_000):
        self.fallback = fallback
        self.budget = None if latency_budget_ms is None else float(latency_budget_ms) / 1e3
        self.switch_after = int(switch_after)
        self.calls = 0
        self.fallbacks = 0
        self.violations = {k: 0 for k in self.KINDS}
        self.last_violation: Optional[str] = None
        self.latencies: deque = deque(maxlen=keep)
        self._late = 0
        self.switched = False

    def run(self, policy: Any, x: np.ndarray, state: Optional[tuple] = None) -> Any:
        """The action batch for ``x``; for a recurrent policy, ``state`` = (h, c, episode_start) the
        carried inputs and the result (action, h', c'): the fallback steps from the same carried
        state, and its h', c' (checked finite) become the state."""
        n = len(x)
        self.calls += 1
        primary = self.fallback if self.switched else policy
        call = (lambda p: p.run_batched(x)) if state is None else (lambda p: p.run_step_batched(x, *state))
        t0 = time.perf_counter()
        try:
            out = call(primary)
            kind = self._violation(policy, out, n, state is not None)
            detail = kind
        except Exception as exc:  # a backend failure is answered like a wrong action
            out, kind, detail = None, "exception", _one_line(exc)
        dt = time.perf_counter() - t0
        self.latencies.append(dt)
        if kind is None:
            if self.budget is not None and dt > self.budget:
                self.violations["latency"] += 1
                self._late += 1
                if self.switch_after and self._late >= self.switch_after and self.fallback is not None:
                    self.switched = True
            else:
                self._late = 0
            return out
        self.violations[kind] += 1
        self.last_violation = f"{primary.backend}: {detail}"
        if self.fallback is None or primary is self.fallback:
            raise GuardError(f"guarded policy: backend {primary.backend} returned {detail} and no fallback is "
                             f"available")
        self.fallbacks += 1
        out = call(self.fallback)
        kind2 = self._violation(policy, out, n, state is not None)
        if kind2 is not None:
            raise GuardError(f"guarded policy: backend {primary.backend} returned {detail}, and the fallback "
                             f"{self.fallback.backend} returned {kind2}")
        return out

    @staticmethod
    def _violation(policy: Any, out: Any, n: int, recurrent: bool) -> Optional[str]:
        if not recurrent:
            return policy.action_violation(out, n)
        if not isinstance(out, tuple) or len(out) != 3:
            return "shape"
        want = (n, policy.state_size)
        for s in out[1:]:
            if not isinstance(s, np.ndarray) or s.shape != want:
                return "shape"
            if not np.isfinite(s).all():
                return "nonfinite"
        return policy.action_violation(out[0], n)

    def stats(self) -> dict:
        lat = np.asarray(self.latencies, np.float64) * 1e6
        return {"calls": self.calls, "violations": dict(self.violations), "fallbacks": self.fallbacks,
                "fallback_backend": None if self.fallback is None else self.fallback.backend,
                "switched_to_fallback": self.switched, "last_violation": self.last_violation,
                "latency_budget_ms": None if self.budget is None else self.budget * 1e3,
                "latency_us": {"p50": float(np.percentile(lat, 50)) if lat.size else None,
                               "p99": float(np.percentile(lat, 99)) if lat.size else None}}
