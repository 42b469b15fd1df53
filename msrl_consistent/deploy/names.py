"""The vocabulary of an export directory: schema version, file names, limits (the backends and the
formats are objects of their own: :mod:`.backends`, :mod:`.formats`)."""
from __future__ import annotations

import os

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

LITE_ASCEND_PRECISION_MODES = ("enforce_fp32", "preferred_fp32", "enforce_fp16", "enforce_origin", "preferred_optimal")
LITE_CPU_PRECISION_MODES = ("enforce_fp32", "preferred_fp16")

