"""The state of a recurrent policy on the caller's side: per env the LSTM's ``h`` and ``c`` and
the ``episode_start`` flag the next step takes (1.0 on an episode's first step; the graph zeroes
the incoming state there, so the state is never reset one step off).

:class:`Policy.act <msrl_deploy.policy.Policy.act>` keeps one :class:`RecurrentState` (the
state of the envs whose observations it is given, any number of them); ``Policy.step`` lets a
caller own the state itself. NumPy only, as the rest of the deploy package.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .errors import ExportError
from .fields import _Fields, _short
from .names import MANIFEST, MAX_DIM

State = Tuple[np.ndarray, np.ndarray]
"""(h, c), each float32 (envs, hidden)."""

STATE_INPUTS = ("h", "c", "episode_start")
"""The graph's inputs after ``obs``, in this order."""
STATE_OUTPUTS = ("h_next", "c_next")
"""The graph's outputs after ``action``, in this order."""
RESET_RULE = ("episode_start is 1.0 on the first step of an episode, else 0.0; the graph zeroes the incoming "
              "state there (state * (1 - episode_start)) before the LSTM step; start from zeros, then feed "
              "h_next, c_next back as the next step's h, c")


def state_io(hidden: int, batch) -> dict:
    """The manifest's ``io.state`` section of a recurrent export (``batch`` None: dynamic)."""
    row = {"shape": [batch, int(hidden)], "dtype": "float32"}
    return {"hidden": int(hidden),
            "inputs": [dict(name="h", **row), dict(name="c", **row),
                       {"name": "episode_start", "shape": [batch], "dtype": "float32"}],
            "outputs": [dict(name="h_next", **row), dict(name="c_next", **row)],
            "initial": "zeros", "reset": RESET_RULE}


def read_state_io(f: _Fields, batch: Optional[int]) -> int:
    """The state size of an export from its ``io.state`` section (0: not recurrent), checked to be
    exactly :func:`state_io` of that size and batch (names, order, shapes, dtypes)."""
    io = f.get("io", "dict")
    if "state" not in io:
        return 0
    hidden = f.int_in("io.state.hidden", 1, MAX_DIM)
    want = state_io(hidden, batch)
    got = io["state"]
    for key in ("inputs", "outputs", "initial"):
        if not isinstance(got, dict) or got.get(key) != want[key]:
            raise ExportError(f"{MANIFEST}: field 'io.state.{key}' is {_short(got.get(key) if isinstance(got, dict) else got)}, "
                              f"expected {_short(want[key])} (a recurrent graph's state of {hidden} units at batch "
                              f"{'dynamic' if batch is None else batch})")
    return hidden


class RecurrentState:
    """The carried state of ``hidden`` units per env. Before the first step and after
    ``reset()`` the next call may bring any number of envs: each starts an episode (zero state,
    flag 1). Later calls must bring the same number of envs, or ``ValueError``."""

    def __init__(self, hidden: int):
        self.hidden = int(hidden)
        self.h: Optional[np.ndarray] = None
        self.c: Optional[np.ndarray] = None
        self.starts: Optional[np.ndarray] = None
        self.last_starts: Optional[np.ndarray] = None

    def zeros(self, n: int) -> State:
        return np.zeros((n, self.hidden), np.float32), np.zeros((n, self.hidden), np.float32)

    def inputs(self, n: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(h, c, episode_start) for the next step of ``n`` envs."""
        if self.h is None or self.c is None or self.starts is None:
            self.h, self.c = self.zeros(n)
            self.starts = np.ones(n, np.float32)
        elif self.h.shape[0] != n:
            raise ValueError(f"this recurrent policy carries the state of {self.h.shape[0]} envs, got {n} "
                             f"observations; call reset() before stepping another number of envs")
        return self.h, self.c, self.starts

    def update(self, h: np.ndarray, c: np.ndarray) -> None:
        """The step's outputs become the state; no env starts an episode at the next step."""
        self.h, self.c = np.asarray(h, np.float32), np.asarray(c, np.float32)
        self.starts = np.zeros(self.h.shape[0], np.float32)

    def step(self, run, x: np.ndarray) -> np.ndarray:
        """One step of the envs whose observations are ``x``: ``run(x, h, c, episode_start) ->
        (action, h', c')`` on the carried state, whose outputs become the state; -> the action.
        ``last_starts`` keeps the flags the step was given (what a trace records)."""
        h0, c0, starts = self.inputs(x.shape[0])
        action, h, c = run(x, h0, c0, starts)
        self.last_starts = starts
        self.update(h, c)
        return action

    def reset(self, mask=None) -> None:
        """Start new episodes: every env (``mask`` None: the next call may bring any number of
        envs) or the envs where the boolean ``mask`` (envs,) is true."""
        if mask is None or self.h is None or self.starts is None:
            self.h = self.c = self.starts = None
            return
        m = np.asarray(mask)
        if m.shape != (self.h.shape[0],) or m.dtype != bool:
            raise ValueError(f"reset(mask): expected a boolean mask of shape ({self.h.shape[0]},) (one flag per env), "
                             f"got {m.dtype} of shape {m.shape}")
        self.starts = np.where(m, np.float32(1.0), self.starts).astype(np.float32)


def check_state(state, n: int, hidden: int) -> State:
    """A caller's (h, c) for ``n`` envs, validated: float32 arrays of shape (n, hidden)."""
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        raise ValueError(f"expected the state as a tuple (h, c) of float32 arrays of shape ({n}, {hidden}), "
                         f"got {type(state).__name__}")
    out = []
    for name, part in zip(("h", "c"), state):
        arr = np.asarray(part)
        if arr.shape != (n, hidden) or not np.issubdtype(arr.dtype, np.floating) or not np.isfinite(arr).all():
            raise ValueError(f"expected state {name} as finite float32 of shape ({n}, {hidden}), got {arr.dtype} of "
                             f"shape {arr.shape}")
        out.append(np.ascontiguousarray(arr, np.float32))
    return out[0], out[1]


def check_starts(episode_start, n: int) -> np.ndarray:
    """A caller's episode_start flags for ``n`` envs: shape (n,) of 0/1 (bool or numbers)."""
    arr = np.asarray(episode_start)
    if arr.shape == () and n == 1:
        arr = arr.reshape(1)
    if arr.shape != (n,) or arr.dtype == object or not np.isin(arr.astype(np.float64), (0.0, 1.0)).all():
        raise ValueError(f"expected episode_start as {n} flags of 0 or 1 (bool or numbers), shape ({n},), got "
                         f"{arr.dtype} of shape {arr.shape}")
    return arr.astype(np.float32)
