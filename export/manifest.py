"""manifest.json: what an export directory holds and how it was made.

Schema version 1 fields (all required): schema_version, created, msrl_version, versions,
algorithm, env_id, env, spaces, source, export, io, files, golden. ``files`` maps each
artifact file name to its sha256; ``msrl verify`` checks every one before anything runs.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from typing import Dict

from msrl_consistent.config import ConfigError
from msrl_consistent.determinism import file_sha256

SCHEMA_VERSION = 1
REQUIRED = ("schema_version", "created", "msrl_version", "versions", "algorithm", "env_id", "env", "spaces",
            "source", "export", "io", "files", "golden")


class IntegrityError(RuntimeError):
    """A file of an export directory does not match its manifest (exit 2)."""


def versions() -> Dict[str, str]:
    import gymnasium
    import mindspore
    import numpy

    import msrl_consistent

    out = {"msrl_consistent": msrl_consistent.__version__, "mindspore": mindspore.__version__,
           "numpy": numpy.__version__, "gymnasium": gymnasium.__version__,
           "python": platform.python_version()}
    try:
        import onnx  # noqa: F401
        out["onnx"] = onnx.__version__
    except ImportError:
        pass
    return out


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def read_manifest(export_dir: str) -> dict:
    """Read and validate manifest.json; unknown schema versions and missing fields are errors."""
    path = os.path.join(export_dir, "manifest.json")
    if not os.path.isfile(path):
        raise ConfigError(f"{export_dir} is not an export directory (no manifest.json)")
    try:
        with open(path, "r", encoding="utf-8") as fh:
            m = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IntegrityError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(m, dict):
        raise IntegrityError(f"{path}: expected a JSON object")
    if m.get("schema_version") != SCHEMA_VERSION:
        raise IntegrityError(f"{path}: unknown schema_version {m.get('schema_version')!r} "
                             f"(this msrl-consistent reads version {SCHEMA_VERSION})")
    missing = [k for k in REQUIRED if k not in m]
    if missing:
        raise IntegrityError(f"{path}: missing fields {', '.join(missing)}")
    return m


def check_integrity(export_dir: str, manifest: dict) -> Dict[str, str]:
    """sha256 of every file listed in the manifest; a missing or changed file raises IntegrityError."""
    checked = {}
    for name, expected in sorted(manifest["files"].items()):
        path = os.path.join(export_dir, name)
        if not os.path.isfile(path):
            raise IntegrityError(f"{name}: listed in manifest.json but missing from {export_dir}")
        actual = file_sha256(path)
        if actual != expected:
            raise IntegrityError(f"{name}: sha256 {actual} does not match the manifest's {expected} "
                                 f"(the file was modified or corrupted after export)")
        checked[name] = actual
    return checked
