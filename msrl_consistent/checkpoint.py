"""Atomic checkpoints in safetensors: parameters (normalization statistics included),
optimizer state, counters, NumPy and MindSpore RNG state, and the resolved config.

Files are written to a temporary name in the same directory, fsynced, then renamed, so a
reader never sees a half-written checkpoint under a final name.
"""
from __future__ import annotations

import glob
import json
import os
import re
from typing import Dict, List, Optional, Tuple

import numpy as np

FORMAT = "msrl-checkpoint-1"
_STEP_RE = re.compile(r"step-(\d+)\.safetensors$")


class CheckpointError(RuntimeError):
    """A missing, truncated or corrupt checkpoint (reported without traceback, exit 2)."""


def atomic_write_bytes(path: str, data: bytes) -> None:
    d = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(d, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(d)


def atomic_write_text(path: str, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _fsync_dir(d: str) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:  # pragma: no cover
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def save_checkpoint(path: str, tensors: Dict[str, np.ndarray], meta: Dict[str, object]) -> None:
    """Write tensors + JSON-encoded metadata atomically."""
    from safetensors.numpy import save

    arrays = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    metadata = {"format": FORMAT}
    metadata.update({k: json.dumps(v) for k, v in meta.items()})
    atomic_write_bytes(path, save(arrays, metadata=metadata))


def load_checkpoint(path: str) -> Tuple[Dict[str, np.ndarray], Dict[str, object]]:
    """Read a checkpoint; a missing, truncated or foreign file raises CheckpointError naming it."""
    from safetensors import safe_open

    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        tensors = {}
        with safe_open(path, framework="numpy") as fh:
            raw_meta = fh.metadata() or {}
            for k in fh.keys():
                tensors[k] = fh.get_tensor(k)
    except Exception as exc:  # safetensors raises several types for corrupt headers/data
        hint = ""
        intact = newest_intact(os.path.dirname(path), exclude=path)
        if intact:
            hint = f"; the newest intact checkpoint is {intact}"
        raise CheckpointError(f"checkpoint {path} is truncated or corrupt ({exc}){hint}") from None
    if raw_meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an msrl-consistent checkpoint (format {raw_meta.get('format')!r}, "
                              f"expected {FORMAT!r})")
    meta = {k: json.loads(v) for k, v in raw_meta.items() if k != "format"}
    return tensors, meta


def list_checkpoints(ckpt_dir: str) -> List[str]:
    """Periodic checkpoints sorted by step, then final.safetensors last if present."""
    steps = []
    for p in glob.glob(os.path.join(ckpt_dir, "step-*.safetensors")):
        m = _STEP_RE.search(p)
        if m:
            steps.append((int(m.group(1)), p))
    out = [p for _, p in sorted(steps)]
    final = os.path.join(ckpt_dir, "final.safetensors")
    if os.path.isfile(final):
        out.append(final)
    return out


def _is_intact(path: str) -> bool:
    try:
        load_checkpoint_header(path)
        return True
    except CheckpointError:
        return False


def load_checkpoint_header(path: str) -> Dict[str, object]:
    from safetensors import safe_open
    try:
        with safe_open(path, framework="numpy") as fh:
            meta = fh.metadata() or {}
            for k in fh.keys():  # touching every tensor detects truncation
                fh.get_slice(k)
        if os.path.getsize(path) < 8:
            raise ValueError("too small")
    except Exception as exc:
        raise CheckpointError(f"checkpoint {path} is truncated or corrupt ({exc})") from None
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an msrl-consistent checkpoint")
    return meta


def newest_intact(ckpt_dir: str, exclude: Optional[str] = None) -> Optional[str]:
    """Newest checkpoint (final first, then the highest step) that can be read."""
    for p in reversed(list_checkpoints(ckpt_dir)):
        if exclude and os.path.abspath(p) == os.path.abspath(exclude):
            continue
        if _is_intact(p):
            return p
    return None


def latest_checkpoint(run_dir: str) -> str:
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    cks = list_checkpoints(ckpt_dir)
    if not cks:
        raise CheckpointError(f"run directory {run_dir} has no checkpoint (expected {ckpt_dir}/*.safetensors)")
    return cks[-1]


def rank_path(path: str, rank: int) -> str:
    """Where data-parallel rank ``rank`` (> 0) keeps its own state for checkpoint ``path``:
    ``checkpoints/ranks/step-N.rank<R>.safetensors``."""
    name = os.path.basename(path)[:-len(".safetensors")]
    return os.path.join(os.path.dirname(path), "ranks", f"{name}.rank{rank}.safetensors")


def written_by(path: str) -> Tuple[int, List[str]]:
    """(workers, unreadable): how many data-parallel ranks wrote checkpoint ``path`` and which of
    their own files (rank_path) are missing, truncated or corrupt."""
    world = int(json.loads(load_checkpoint_header(path).get("world", "1")))
    return world, [q for q in (rank_path(path, r) for r in range(1, world)) if not _is_intact(q)]


def prune(ckpt_dir: str, keep: int) -> None:
    """Delete all but the newest ``keep`` periodic checkpoints and their ranks' files (final is
    never deleted)."""
    periodic = [p for p in list_checkpoints(ckpt_dir) if _STEP_RE.search(p)]
    for p in periodic[:-keep] if keep > 0 else []:
        name = os.path.basename(p)[:-len(".safetensors")]
        for q in [p] + glob.glob(os.path.join(ckpt_dir, "ranks", f"{name}.rank*.safetensors")):
            try:
                os.unlink(q)
            except OSError:  # pragma: no cover
                pass


def load_agent_parameters(agent, tensors: dict, source: str) -> None:
    """Set every parameter of ``agent`` from checkpoint tensors ``agent/<name>``; a missing
    parameter or a shape mismatch raises CheckpointError naming ``source``."""
    from mindspore import Tensor

    from .networks.agents import named_parameters

    params = named_parameters(agent)
    missing = [k for k in params if f"agent/{k}" not in tensors]
    if missing:
        raise CheckpointError(f"{source}: checkpoint lacks parameters {missing[:5]} "
                              f"(was it written by another algorithm or network config?)")
    for k, p in params.items():
        arr = tensors[f"agent/{k}"]
        if tuple(arr.shape) != tuple(p.shape):
            raise CheckpointError(f"{source}: parameter {k} has shape {arr.shape}, the network expects {tuple(p.shape)}")
        p.set_data(Tensor(arr))
