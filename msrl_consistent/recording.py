"""Traces of what a deployed policy saw and did, for `msrl replay`.

A trace (``.npz``, no pickled objects) holds every observation given to ``act`` as the model's
input row (a Dict packed in SpaceSpec.obs_parts's order, a Discrete index as one value, image
pixels kept uint8, with frame stacking the k stacked frames), every action returned ((n,) or, per
dimension and for Box, (n, dims)), for a recurrent policy the episode_start flags each step was
given and the state it returned (``episode_starts`` (n,), ``h`` and ``c`` (n, hidden)), the
batch size of each call (so replay runs at the recorded batch shape),
optionally the rewards and episode boundaries of the rollout, and the sha256 of the
artifact's manifest.json, so a trace is always tied to the artifact that produced it.

Size is bounded: past ``limit`` observations, further calls are counted but not stored.
The file is written atomically when the recorder is closed, at interpreter exit, and on
SIGINT/SIGTERM in ``msrl eval`` (which turns them into exceptions that unwind through close).
"""
from __future__ import annotations

import atexit
import io
import json
from typing import List

import numpy as np

from .checkpoint import atomic_write_bytes

TRACE_FORMAT = "msrl-trace-1"


class TraceRecorder:
    def __init__(self, path: str, manifest_sha256: str, backend: str, obs_dim: int, discrete: bool,
                 limit: int = 100_000, obs_dtype: str = "float32", state_size: int = 0):
        if limit < 1:
            raise ValueError(f"trace limit must be >= 1, got {limit}")
        self.path = path
        self.meta = {"format": TRACE_FORMAT, "manifest_sha256": manifest_sha256, "backend": backend,
                     "limit": int(limit), "state_size": int(state_size)}
        self.state_size = int(state_size)
        self.limit = int(limit)
        self.obs_dim = obs_dim
        self.obs_dtype = np.dtype(obs_dtype)
        self.discrete = discrete
        # one entry per recorded call, (obs, actions, state or None), appended at once: a signal
        # that flushes the trace between two calls never sees a call half recorded
        self._records: List[tuple] = []
        self._rewards: List[float] = []
        self._dones: List[bool] = []
        self.episodes: List[dict] = []
        self.stored = 0
        self.dropped = 0
        self._closed = False
        self.extra_meta = None
        """Optional callable returning more metadata at flush time (the guard's counters)."""
        atexit.register(self.close)

    def record(self, obs: np.ndarray, actions: np.ndarray, state=None) -> None:
        """One ``act`` call: its model-input rows and actions; ``state`` (a recurrent policy's
        episode_start flags and next h, c) when the recorder has a state size."""
        n = len(obs)
        if self.stored + n > self.limit:
            self.dropped += n
            return
        st = tuple(np.array(a, np.float32, copy=True) for a in state) if self.state_size else None
        # uint8 image rows stay uint8 (a float32 copy is 4x the size and not what the model saw)
        rows = np.array(obs, np.uint8 if np.asarray(obs).dtype == np.uint8 else np.float32, copy=True)
        # continuous and per-dimension discrete actions (MultiDiscrete / MultiBinary): (n, dims)
        act = (np.array(actions, copy=True).reshape(n, -1) if not self.discrete or np.ndim(actions) == 2
               else np.array(actions, copy=True).reshape(n))
        self._records.append((rows, act, st))
        self.stored += n

    def step_result(self, reward: float, done: bool) -> None:
        """Reward and episode end of the last single-observation call (from a rollout)."""
        if self.stored <= self.limit and len(self._rewards) < self.stored:
            self._rewards.append(float(reward))
            self._dones.append(bool(done))

    def episode(self, seed: int, ret: float, length: int) -> None:
        self.episodes.append({"seed": int(seed), "return": float(ret), "length": int(length)})

    def arrays(self) -> dict:
        records = list(self._records)
        obs = np.concatenate([r[0] for r in records]) if records else np.zeros((0, self.obs_dim), self.obs_dtype)
        if records:
            act = np.concatenate([r[1] for r in records])
        else:
            act = np.zeros((0,), np.int32) if self.discrete else np.zeros((0, 0), np.float32)
        out = {"obs": obs, "actions": act, "call_sizes": np.asarray([len(r[0]) for r in records], np.int64)}
        if self.state_size:
            for i, key in enumerate(("episode_starts", "h", "c")):
                shape = (0,) if i == 0 else (0, self.state_size)
                out[key] = np.concatenate([r[2][i] for r in records]) if records else np.zeros(shape, np.float32)
        if self._rewards:
            out["rewards"] = np.asarray(self._rewards, np.float64)
            out["dones"] = np.asarray(self._dones, bool)
        meta = dict(self.meta, stored=int(len(obs)), dropped=self.dropped, episodes=self.episodes)
        if self.extra_meta is not None:
            meta.update(self.extra_meta())
        out["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        return out

    def flush(self) -> None:
        buf = io.BytesIO()
        np.savez(buf, **self.arrays())
        atomic_write_bytes(self.path, buf.getvalue())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self.flush()


def read_trace(path: str) -> dict:
    """Load a trace written by TraceRecorder (no pickle)."""
    from .config import ConfigError
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise ConfigError(f"trace not found: {path}") from None
    except (ValueError, OSError, EOFError) as exc:
        raise ConfigError(f"{path} is not a readable trace: {exc}") from None
    if "meta" not in data or "obs" not in data:
        raise ConfigError(f"{path} is not an msrl trace (no meta/obs arrays)")
    meta = json.loads(bytes(data.pop("meta")).decode())
    if meta.get("format") != TRACE_FORMAT:
        raise ConfigError(f"{path}: unknown trace format {meta.get('format')!r} (expected {TRACE_FORMAT})")
    data["meta"] = meta
    return data
