"""Seeding and the deterministic MindSpore context.

All sampling noise of the training loops is drawn on the host from one NumPy Generator
(passed explicitly, never the global one) and fed to the graphs as inputs, so a run's
randomness is exactly the Generator's stream: the same config and seed give bit-identical
parameters.
"""
from __future__ import annotations

import hashlib
import random
from typing import Dict

import numpy as np

_CONFIGURED = {"device": None}


def configure_mindspore(device: str = "CPU") -> None:
    """GRAPH_MODE, the device target and deterministic kernels (idempotent)."""
    import mindspore as ms

    if _CONFIGURED["device"] == device:
        return
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        ms.set_device(device)
    except (RuntimeError, ValueError) as exc:
        # Once any MindSpore op has run (a library user's own code), the runtime is initialized
        # and set_device refuses every call, even for the device already in use: that is fine.
        current = ms.get_context("device_target")
        if current != device:
            raise RuntimeError(f"MindSpore cannot use device {device!r} (the runtime already runs on "
                               f"{current!r}): {exc}") from None
    ms.set_deterministic(True)
    _CONFIGURED["device"] = device


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python's `random`, MindSpore's global seed, and return the run's NumPy Generator."""
    import mindspore as ms

    random.seed(seed)
    ms.set_seed(seed)
    return np.random.default_rng(seed)


def params_sha256(params: Dict[str, np.ndarray]) -> str:
    """sha256 over parameter names, dtypes, shapes and bytes, in sorted name order."""
    h = hashlib.sha256()
    for name in sorted(params):
        arr = np.ascontiguousarray(params[name])
        h.update(name.encode())
        h.update(str(arr.dtype).encode())
        h.update(str(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()

