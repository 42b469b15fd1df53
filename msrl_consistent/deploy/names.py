"""The vocabulary of an export directory: schema version, file names, limits, backend names."""
from __future__ import annotations

import os

from .errors import ExportError

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
BUNDLE_FILE = "policy.py"
"""The bundle's entry: ``python policy.py check``, ``from policy import load``."""
BUNDLE_PACKAGE = "msrl_deploy.zip"
"""This package, zipped, beside the entry (imported from the zip: one file, one sha256)."""
MAX_MANIFEST_BYTES = 16 << 20
MAX_FILES = 64
MAX_DIM = 1 << 16
"""Largest size of one observation dimension (a 16K frame side), action count or choice count."""
MAX_BATCH = 1 << 16
MAX_GOLDEN = 1 << 22
MAX_ROW_BYTES = 1 << 31
"""Largest model input row (one observation, frames stacked): 2 GiB, so an 8K RGB frame stacked 8
times (796 MB) passes; a 4K RGB frame stacked 4 times is 99.5 MB, a stacked Atari frame 403 KB."""


def memory_bytes() -> int:
    """This machine's physical memory: what a declared golden set or batch must fit in (the real
    limit of a reader that loads them), 64 GiB where the OS does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 64 << 30
CROSS_RUNTIME_ATOL = 1e-5

BACKENDS = ("mindspore_lite", "om", "onnxruntime", "mindspore")
ALIASES = {"lite": "mindspore_lite", "ort": "onnxruntime"}
FORMAT_FILE = {"mindir": "actor.mindir", "onnx": "actor.onnx", "om": "actor.om", "lite": "actor_lite.mindir"}
MODEL_FILES = {"mindspore_lite": ("actor_lite.mindir", "actor.mindir"), "mindspore": ("actor.mindir",),
               "onnxruntime": ("actor.onnx",), "om": ("actor.om",)}
"""Each backend's model files, best first: a backend runs the first one the export holds. Lite runs
the model its own converter made (``--format lite``), else MindSpore's actor.mindir, which only a
Lite that reads its MindIR version can load."""
INSTALL = {
    "onnxruntime": "pip install onnxruntime",
    "mindspore": "pip install mindspore (the CPU wheel matching your Python)",
    "mindspore_lite": "`msrl lite install` (Lite 2.0.0's libraries and msrl's shim; x86_64 Linux) or the MindSpore "
                      "Lite wheel for your device and Python from https://www.mindspore.cn/lite/docs/en/master/use/"
                      "downloads.html (plus CANN for target ascend)",
    "om": "ais_bench and aclruntime (the ait benchmark wheels, https://gitee.com/ascend/ait) with CANN",
}
LITE_ASCEND_PRECISION_MODES = ("enforce_fp32", "preferred_fp32", "enforce_fp16", "enforce_origin", "preferred_optimal")
LITE_CPU_PRECISION_MODES = ("enforce_fp32", "preferred_fp16")



def canonical_backend(name: str) -> str:
    """The backend's one name (``lite`` -> ``mindspore_lite``, ``ort`` -> ``onnxruntime``)."""
    b = ALIASES.get(name, name)
    if b not in BACKENDS:
        raise ExportError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)} (or lite)")
    return b



def default_atol(backend: str, precision: str = "fp32", against: str = "train") -> float:
    """The default tolerance between ``backend``'s actions and ``against``'s: 0 (bit-identical)
    where MindSpore computes both in fp32 at the same batch shape, else CROSS_RUNTIME_ATOL.
    Discrete actions are always compared for equality."""
    same_engine = backend == "mindspore" and against in ("train", "mindspore")
    return 0.0 if same_engine and precision == "fp32" else CROSS_RUNTIME_ATOL
