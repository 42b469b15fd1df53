"""The deployed policy (:class:`Policy`, :class:`ExportPolicy`) and :func:`load`."""
from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

from .backends import Runner, make_runner
from .errors import BackendUnavailable, ExportError
from .fields import column_n
from .frames import FrameStack, MaxAndSkip
from .guard import Guard
from .inputs import Inputs
from .names import INSTALL, MODEL_FILE, canonical_backend
from .reader import Export, open_export


def in_chunks(run, x: np.ndarray, batch: int) -> np.ndarray:
    """``run`` on ``x`` in calls of exactly ``batch`` rows (the last one padded by repeating its
    last row; the padding's outputs are dropped)."""
    if x.shape[0] == batch:
        return run(x)
    outs = []
    for start in range(0, x.shape[0], batch):
        chunk = x[start:start + batch]
        n = chunk.shape[0]
        if n < batch:
            chunk = np.concatenate([chunk, np.repeat(chunk[-1:], batch - n, axis=0)])
        outs.append(run(chunk)[:n])
    return np.concatenate(outs)


class Policy(Inputs):
    """Input validation, batching, output shaping and the optional guard, shared by every backend
    (and by the package's training-cell policy)."""

    backend = ""
    recorder = None
    guard: Optional["Guard"] = None

    def __init__(self, obs_dim: int, fixed_batch: Optional[int], discrete: bool, n_actions: int,
                 act_low=None, act_high=None, obs_n: int = 0, nvec=None, obs_parts=None, image=None,
                 frame_stack: int = 1, max_and_skip: int = 1):
        self._obs_dim = int(obs_dim)
        # the action repeat + two-frame max the policy was trained behind (None: none), for the deploying loop
        self.max_and_skip = MaxAndSkip(max_and_skip) if int(max_and_skip) > 1 else None
        # Image observations: {"shape": the env's frame shape, "layout": HWC | CHW}; uint8 model input
        self.image = dict(image) if image else None
        self.frame_stack = int(frame_stack)
        self.frame_dim = self._obs_dim // self.frame_stack
        self._stack = FrameStack(self.frame_stack, self.frame_dim) if self.frame_stack > 1 else None
        # Dict observations: [(key, "Box" | "Discrete", n, shape)] in the row's (sorted) key order
        self.obs_parts = [tuple(p) for p in obs_parts] if obs_parts else None
        self._cols = column_n(int(obs_n), self.obs_parts, self._obs_dim)
        # MultiDiscrete / MultiBinary: choices per action dimension; actions are int (B, len(nvec))
        self.nvec = None if nvec is None else np.asarray(nvec, np.int64)
        self.obs_n = int(obs_n)  # a Discrete observation space's n (0: Box)
        self.fixed_batch = fixed_batch
        self.discrete = bool(discrete)
        self.n_actions = int(n_actions)
        self.act_low = None if act_low is None else np.asarray(act_low, np.float64)
        self.act_high = None if act_high is None else np.asarray(act_high, np.float64)


    def reset_frames(self) -> None:
        """Start new episodes: the frame stack restarts (zeros, then the next observation)."""
        if self._stack is not None:
            self._stack.buf = None


    def act(self, obs) -> np.ndarray:
        """The environment action for one observation (obs_dim,) or a batch (B, obs_dim); for a
        Discrete observation space, an index or a batch of indices (B,); for a Dict space, a dict
        {key: one observation or a batch} (or its packed rows, the keys concatenated in sorted order)."""
        if self.obs_parts and isinstance(obs, dict):
            packed, single = self.pack(obs)
            x = self.validate(packed)
        elif self.image is not None or self._stack is not None:
            x, single = self.frames(obs)
            if self._stack is not None:  # the same FrameStack as the training loop
                x = self._stack.push(x)
        else:
            single = self.is_single(obs)
            x = self.validate(obs)
        out = self.run_batched(x) if self.guard is None else self.guard.run(self, x)
        if self.recorder is not None:
            self.recorder.record(x, out)
        return out[0] if single else out

    __call__ = act

    def run_batched(self, x: np.ndarray) -> np.ndarray:
        """Run at the artifact's batch shape: chunks of ``fixed_batch`` (the last one padded)."""
        if self.fixed_batch is None:
            return self._run(x)
        return in_chunks(self._run, x, self.fixed_batch)

    def act_at_batch(self, obs: np.ndarray, batch: int) -> np.ndarray:
        """Actions for ``obs`` computed ``batch`` rows per call (the golden set's reference shape)."""
        return in_chunks(lambda chunk: self.run_batched(self.validate(chunk)), np.asarray(obs), batch)

    def action_violation(self, out: Any, n: int) -> Optional[str]:
        """None if ``out`` is a valid batch of ``n`` environment actions, else the kind of violation."""
        if not isinstance(out, np.ndarray):
            return "shape"
        if self.nvec is not None:
            if out.shape != (n, len(self.nvec)) or out.dtype.kind not in "iu":
                return "shape"
            return None if n == 0 or (out.min() >= 0 and (out < self.nvec).all()) else "out_of_range"
        if self.discrete:
            if out.shape != (n,) or out.dtype.kind not in "iu":
                return "shape"
            return None if n == 0 or (out.min() >= 0 and out.max() < self.n_actions) else "out_of_range"
        if out.shape != (n, self.n_actions) or out.dtype.kind != "f":
            return "shape"
        if not np.isfinite(out).all():
            return "nonfinite"
        if self.act_low is not None and ((out < self.act_low).any() or (out > self.act_high).any()):
            return "out_of_range"
        return None

    def guard_stats(self) -> Optional[dict]:
        return None if self.guard is None else self.guard.stats()

    def _run(self, x: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError



class ExportPolicy(Policy):
    """An export directory on one backend."""

    def __init__(self, export: Export, runner: Runner):
        super().__init__(export.obs_dim, runner.fixed_batch, export.discrete, export.n_actions,
                         export.act_low, export.act_high, obs_n=export.obs_n, nvec=export.nvec,
                         obs_parts=export.obs_parts, frame_stack=export.frame_stack,
                         max_and_skip=export.max_and_skip, image=None if export.image_layout is None else
                         {"shape": export.frame_shape, "layout": export.image_layout})
        self.export = export
        self.runner = runner
        self.backend = runner.backend

    def _run(self, x: np.ndarray) -> np.ndarray:
        return self.runner.run(x)


def available_backends(export: Export) -> List[str]:
    """Backends whose model file the export holds and whose library imports here, best first."""
    import importlib.util
    out = []
    for b, module in (("om", "ais_bench"), ("om", "aclruntime"), ("mindspore_lite", "mindspore_lite"),
                      ("onnxruntime", "onnxruntime"), ("mindspore", "mindspore")):
        if MODEL_FILE[b] in export.files and b not in out and importlib.util.find_spec(module) is not None:
            out.append(b)
    return out


def load(directory: str = ".", backend: Optional[str] = None, *, guard: bool = False, fallback: Optional[str] = "auto",
         latency_budget_ms: Optional[float] = None, switch_after: int = 3, target: str = "cpu",
         device_id: int = 0, precision_mode: Optional[str] = None, check_hashes: bool = True) -> ExportPolicy:
    """Open and validate an export directory and load it on ``backend`` (None: the first of om,
    mindspore_lite, onnxruntime, mindspore that is installed and exported).

    ``guard=True``: every action is checked (finite, inside the action space) and timed; a
    violation or a backend exception is answered by the ``fallback`` backend ('auto': another
    installed backend of the same export; None: raise GuardError); ``switch_after`` consecutive
    calls over ``latency_budget_ms`` move every later call to the fallback. Counters: ``guard_stats()``.
    """
    export = open_export(directory, None, hashes=check_hashes, golden=False)
    if backend is None:
        found = available_backends(export)
        if not found:
            raise BackendUnavailable(f"no backend for this export is installed (exported: "
                                     f"{', '.join(sorted(export.files))}); install one of: onnxruntime "
                                     f"({INSTALL['onnxruntime']}), {INSTALL['mindspore_lite']}, {INSTALL['om']}")
        backend = found[0]
    backend = canonical_backend(backend)
    open_export_backend_check(export, backend)
    policy = ExportPolicy(export, make_runner(export, backend, target=target, device_id=device_id,
                                              precision_mode=precision_mode))
    if guard:
        fb = None
        if fallback == "auto":
            others = [b for b in available_backends(export) if b != backend]
            fallback = others[0] if others else None
        if fallback is not None:
            fallback = canonical_backend(fallback)
            open_export_backend_check(export, fallback)
            fb = ExportPolicy(export, make_runner(export, fallback))
        policy.guard = Guard(fb, latency_budget_ms, switch_after)
    return policy


def open_export_backend_check(export: Export, backend: str) -> None:
    name = MODEL_FILE[backend]
    if name not in export.files:
        hint = "; export again with --format mindir,onnx" if name.endswith(".onnx") else ""
        raise ExportError(f"{name}: not in this export (formats: {', '.join(export.formats)}), needed by backend "
                          f"{backend}{hint}")
