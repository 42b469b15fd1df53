"""Run an export directory where it is deployed, and prove it there: one self-contained file.

This module needs only the Python standard library and NumPy at import time; each backend's
library is imported when that backend is chosen. ``msrl export`` copies it into every export
directory as ``policy.py`` (its sha256 in the manifest), so on a board with nothing but NumPy
and a backend library installed::

    python policy.py check [--backend onnxruntime|mindspore_lite|om|mindspore]   # exit 0 / 1 / 2

    from policy import load
    pi = load(".", backend="lite")
    action = pi.act(obs)

Inside the package (``msrl_consistent.deploy``) it is the one inference path of every export
backend (``runtime.load_policy``) and the one validating opener of export directories
(:func:`open_export`), used by ``msrl verify``, ``msrl eval``, ``msrl replay`` and ``check``.

Validation before anything runs (:func:`open_export`), each failure an :class:`ExportError`
naming the file and what is wrong (exit 2):

* manifest.json: a regular JSON object of bounded size, schema version 1, the fields used here
  present with the right types and mutually consistent (spaces, io shapes and dtypes, export
  batch, golden set), declared sizes bounded before anything is allocated;
* files: plain names inside the directory (no separator, no ``..``, no link leading out), each
  present as a regular file with its sha256;
* golden.npz: read without pickle, its arrays' shapes and dtypes checked against the manifest
  from the .npy headers before any array is allocated; observations finite;
* the chosen backend's model file: listed in the manifest, loadable, and it runs on the
  manifest's input shape.

Exit codes of ``check`` (and of ``msrl verify``): 0 pass, 1 the artifact loads but acts
differently from the training cell, 2 integrity or environment error (one line).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import stat
import sys
import time
import zipfile
from collections import deque
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
BUNDLE_FILE = "policy.py"
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
EXIT_PASS, EXIT_MISMATCH, EXIT_ERROR = 0, 1, 2

BACKENDS = ("mindspore_lite", "om", "onnxruntime", "mindspore")
ALIASES = {"lite": "mindspore_lite", "ort": "onnxruntime"}
MODEL_FILE = {"mindspore_lite": "actor.mindir", "mindspore": "actor.mindir", "onnxruntime": "actor.onnx",
              "om": "actor.om"}
FORMAT_FILE = {"mindir": "actor.mindir", "onnx": "actor.onnx", "om": "actor.om"}
INSTALL = {
    "onnxruntime": "pip install onnxruntime",
    "mindspore": "pip install mindspore (the CPU wheel matching your Python)",
    "mindspore_lite": "the MindSpore Lite wheel for your device and Python from "
                      "https://www.mindspore.cn/lite/docs/en/master/use/downloads.html (plus CANN for target ascend)",
    "om": "ais_bench and aclruntime (the ait benchmark wheels, https://gitee.com/ascend/ait) with CANN",
}
LITE_ASCEND_PRECISION_MODES = ("enforce_fp32", "preferred_fp32", "enforce_fp16", "enforce_origin", "preferred_optimal")
LITE_CPU_PRECISION_MODES = ("enforce_fp32", "preferred_fp16")


class ExportError(RuntimeError):
    """The export directory is broken, hostile or cannot be run here (exit 2, one line)."""


class BackendUnavailable(ExportError):
    """The backend's library is not installed (the message says what to install)."""


class GuardError(RuntimeError):
    """A guarded policy met a violation and had no fallback that answered correctly."""


def canonical_backend(name: Optional[str]) -> Optional[str]:
    if name is None:
        return None
    b = ALIASES.get(name, name)
    if b not in BACKENDS:
        raise ExportError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)} (or lite)")
    return b


# -- validation ---------------------------------------------------------------------------------
def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}".rstrip(": ")


def plain_name(name: Any) -> bool:
    """A file name that stays inside its directory: no separator, not '.' or '..', no NUL."""
    return (isinstance(name, str) and 0 < len(name) <= 255 and name not in (".", "..")
            and not any(c in name for c in ("/", "\\", "\x00"))
            and name.isprintable())


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) or v in ("inf", "-inf")


SCHEMA: Dict[str, Any] = {
    "schema_version": "int", "created": "str", "msrl_version": "str", "versions": "dict[str]", "algorithm": "str",
    "env_id": "str", "env": "dict", "spaces": "dict",
    "source": {"run_dir": "str", "checkpoint": "str", "checkpoint_sha256": "str", "config": "dict"},
    "export": {"formats": "list[str]", "precision": "str", "batch": "int|str", "golden_batch": "int",
               "conversion?": "dict", "onnx?": "dict|null"},
    "io": "dict", "files": "dict[str]",
    "golden": {"file": "str", "count": "int", "batch": "int", "reference": "str", "rollout?": "int",
               "bounds?": "int", "episodes?": "int", "seed?": "int"},
    "precision_sweep?": "dict|null",
}
"""The manifest's fields and JSON types (the same as msrl_consistent.manifest.Manifest; a test keeps them equal)."""


def _kind_ok(v: Any, kind: str) -> bool:
    for k in kind.split("|"):
        if (k == "int" and _is_int(v) or k == "str" and isinstance(v, str) or k == "null" and v is None
                or k == "dict" and isinstance(v, dict) or k == "list" and isinstance(v, list)
                or k == "dict[str]" and isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
                or k == "list[str]" and isinstance(v, list) and all(isinstance(x, str) for x in v)):
            return True
    return False


def check_schema(d: Any, schema: Dict[str, Any] = SCHEMA, prefix: str = "") -> None:
    if not isinstance(d, dict):
        raise ExportError(f"{MANIFEST}: field '{prefix.rstrip('.')}' is {_short(d)}, expected an object")
    for key, kind in schema.items():
        name = key.rstrip("?")
        if name not in d:
            if key.endswith("?"):
                continue
            raise ExportError(f"{MANIFEST}: missing field '{prefix}{name}'")
        if isinstance(kind, dict):
            check_schema(d[name], kind, f"{prefix}{name}.")
        elif not _kind_ok(d[name], kind):
            raise ExportError(f"{MANIFEST}: field '{prefix}{name}' is {_short(d[name])}, expected {kind}")


class _Fields:
    """Typed access to the parsed manifest; every failure names manifest.json and the field."""

    def __init__(self, d: dict):
        self.d = d

    def get(self, key: str, kind: str, optional: bool = False):
        cur: Any = self.d
        for part in key.split("."):
            if not isinstance(cur, dict) or part not in cur:
                if optional:
                    return None
                raise ExportError(f"{MANIFEST}: missing field '{key}'")
            cur = cur[part]
        ok = {"int": _is_int, "str": lambda v: isinstance(v, str), "dict": lambda v: isinstance(v, dict),
              "list": lambda v: isinstance(v, list)}[kind](cur)
        if not ok:
            raise ExportError(f"{MANIFEST}: field '{key}' is {_short(cur)}, expected {kind}")
        return cur

    def int_in(self, key: str, lo: int, hi: int) -> int:
        v = self.get(key, "int")
        if not lo <= v <= hi:
            raise ExportError(f"{MANIFEST}: field '{key}' is {v}, expected {lo}..{hi}")
        return v


def _short(v: Any) -> str:
    text = json.dumps(v) if not isinstance(v, float) or np.isfinite(v) else repr(v)
    return (text[:60] + "...") if len(text) > 60 else text


def _bounds(f: _Fields, key: str, n: int, finite: bool) -> np.ndarray:
    vals = f.get(key, "list")
    if len(vals) != n or not all(_is_num(v) for v in vals):
        raise ExportError(f"{MANIFEST}: field '{key}' must be {n} numbers")
    arr = np.array([float(v) for v in vals], np.float64)
    if np.isnan(arr).any() or (finite and not np.isfinite(arr).all()):
        raise ExportError(f"{MANIFEST}: field '{key}' has {'non-finite' if finite else 'NaN'} values")
    return arr


def _width(part) -> int:
    """Values a Dict key takes in the observation row (a Discrete key: its index)."""
    return 1 if part[1] == "Discrete" else int(np.prod(part[3]))


def _dict_parts(f: "_Fields") -> list:
    """[(key, "Box" | "Discrete", n, shape)] of a Dict observation, in the manifest's (sorted) key order."""
    keys = f.get("spaces.observation.keys", "list")
    subs = f.get("spaces.observation.spaces", "dict")
    if (not keys or len(keys) > MAX_DIM or not all(isinstance(k, str) for k in keys) or keys != sorted(set(keys))
            or sorted(subs) != keys):
        raise ExportError(f"{MANIFEST}: field 'spaces.observation.keys' is {_short(keys)}, expected the sorted, "
                          f"distinct keys of 'spaces.observation.spaces'")
    parts = []
    for k in keys:
        sub = subs[k]
        kind = sub.get("type") if isinstance(sub, dict) else None
        if kind == "Discrete" and _is_int(sub.get("n")) and 1 <= sub["n"] <= MAX_DIM:
            parts.append((k, "Discrete", int(sub["n"]), (1,)))
        elif (kind == "Box" and isinstance(sub.get("shape"), list) and sub["shape"]
              and all(_is_int(s) and 1 <= s <= MAX_DIM for s in sub["shape"])):
            parts.append((k, "Box", 0, tuple(sub["shape"])))
        else:
            raise ExportError(f"{MANIFEST}: field 'spaces.observation.spaces.{k}' is {_short(sub)}, expected "
                              f"{{'type': 'Box', 'shape': [...]}} or {{'type': 'Discrete', 'n': n}}")
    return parts


def column_n(obs_n: int, obs_parts, obs_dim: int) -> np.ndarray:
    """Per column of the observation row: n of the Discrete space whose index it holds, 0 for Box values."""
    if obs_n:
        return np.array([obs_n], np.int64)
    if obs_parts:
        return np.concatenate([np.full(_width(p), p[2], np.int64) for p in obs_parts])
    return np.zeros(obs_dim, np.int64)


def not_an_index(values, n) -> np.ndarray:
    """Mask of the values that are not a Discrete(n) index (finite, integer-valued, 0..n-1; ``n``
    broadcasts, one per column of a Dict row)."""
    v = np.asarray(values, np.float64)
    return ~np.isfinite(v) | (v < 0) | (v >= n) | (v != np.round(v))


def space_text(obs_n: int, obs_parts) -> str:
    """The observation space as act's error messages name it."""
    if obs_n:
        return f"Discrete({obs_n})"
    return "Dict(" + ", ".join(f"{k}: " + (f"Discrete({n})" if kind == "Discrete" else f"Box{tuple(shape)}")
                               for k, kind, n, shape in obs_parts) + ")"


class Export:
    """A validated export directory (see :func:`open_export`)."""

    def __init__(self, directory: str, manifest: dict):
        self.dir = directory
        self.root = os.path.realpath(directory)
        self.manifest = manifest
        f = _Fields(manifest)
        if manifest.get("schema_version") != SCHEMA_VERSION:
            raise ExportError(f"{MANIFEST}: unknown schema_version {_short(manifest.get('schema_version'))} "
                              f"(this reader knows version {SCHEMA_VERSION})")
        check_schema(manifest)
        self.algorithm = f.get("algorithm", "str")
        self.env_id = f.get("env_id", "str")
        # spaces
        obs_type = f.get("spaces.observation.type", "str")
        if obs_type not in ("Box", "Discrete", "Dict", "Image"):
            raise ExportError(f"{MANIFEST}: field 'spaces.observation.type' is {_short(obs_type)}, expected Box, "
                              f"Discrete, Dict or Image")
        self.obs_type = obs_type
        fs = manifest["spaces"]["observation"].get("frame_stack") if isinstance(manifest["spaces"].get("observation"), dict) else None
        self.frame_stack = 1
        if fs is not None:
            if (not isinstance(fs, dict) or fs.get("kind") != FrameStack.KIND or fs.get("order") != FrameStack.ORDER
                    or not _is_int(fs.get("k")) or not 2 <= fs["k"] <= 64 or obs_type not in ("Box", "Image")):
                raise ExportError(f"{MANIFEST}: field 'spaces.observation.frame_stack' is {_short(fs)}, expected "
                                  f"{{'kind': 'frame_stack', 'k': 2..64, 'order': 'oldest_first'}} on a Box or Image")
            self.frame_stack = fs["k"]
        obs_d = manifest["spaces"].get("observation")
        ms_ = obs_d.get("max_and_skip") if isinstance(obs_d, dict) else None
        self.max_and_skip = 1
        if ms_ is not None:
            if (not isinstance(ms_, dict) or ms_.get("kind") != MaxAndSkip.KIND or ms_.get("pool") != MaxAndSkip.POOL
                    or not _is_int(ms_.get("skip")) or not 2 <= ms_["skip"] <= 64 or obs_type != "Image"):
                raise ExportError(f"{MANIFEST}: field 'spaces.observation.max_and_skip' is {_short(ms_)}, expected "
                                  f"{{'kind': 'max_and_skip', 'skip': 2..64, 'pool': 'max_last_2'}} on an Image")
            self.max_and_skip = ms_["skip"]
        self.image_layout = None
        if obs_type == "Image":
            self.image_layout = f.get("spaces.observation.layout", "str")
            if self.image_layout not in ("HWC", "CHW") or f.get("spaces.observation.dtype", "str") != "uint8":
                raise ExportError(f"{MANIFEST}: an Image observation needs 'layout' HWC or CHW and dtype uint8")
        self.input_dtype = "uint8" if obs_type == "Image" else "float32"
        self.obs_n = f.int_in("spaces.observation.n", 1, MAX_DIM) if obs_type == "Discrete" else 0
        self.obs_parts = _dict_parts(f) if obs_type == "Dict" else None
        shape = f.get("spaces.observation.shape", "list")
        if self.obs_parts is not None and shape != [sum(_width(p) for p in self.obs_parts)]:
            raise ExportError(f"{MANIFEST}: field 'spaces.observation.shape' is {_short(shape)}, but the Dict keys "
                              f"hold {sum(_width(p) for p in self.obs_parts)} values")
        if obs_type == "Discrete" and shape != [1]:
            raise ExportError(f"{MANIFEST}: field 'spaces.observation.shape' is {_short(shape)}, expected [1] for a "
                              f"Discrete observation (its index)")
        if not shape or len(shape) > 32 or not all(_is_int(s) and 1 <= s <= MAX_DIM for s in shape):
            raise ExportError(f"{MANIFEST}: field 'spaces.observation.shape' is {_short(shape)}, expected 1 to 32 "
                              f"sizes of 1..{MAX_DIM}")
        self.frame_shape = tuple(shape)
        self.frame_dim = math.prod(shape)
        self.obs_dim = self.frame_dim * self.frame_stack  # the model's input row: k frames
        row_bytes = self.obs_dim * (1 if self.input_dtype == "uint8" else 4)
        if row_bytes > MAX_ROW_BYTES:
            raise ExportError(f"{MANIFEST}: field 'spaces.observation.shape' is {_short(shape)} (x {self.frame_stack} "
                              f"stacked): one observation row of {row_bytes} bytes, at most {MAX_ROW_BYTES}")
        if obs_type != "Image":
            self.obs_low = _bounds(f, "spaces.observation.low", self.frame_dim, False)
            self.obs_high = _bounds(f, "spaces.observation.high", self.frame_dim, False)
        kind = f.get("spaces.action.type", "str")
        self.act_kind = kind
        self.act_low = self.act_high = None
        self.nvec: Optional[np.ndarray] = None  # MultiDiscrete / MultiBinary: choices per dimension
        if kind == "Discrete":
            self.discrete = True
            self.n_actions = f.int_in("spaces.action.n", 1, MAX_DIM)
        elif kind == "MultiBinary":
            self.discrete = True
            self.n_actions = f.int_in("spaces.action.n", 1, MAX_DIM)
            self.nvec = np.full(self.n_actions, 2, np.int64)
        elif kind == "MultiDiscrete":
            self.discrete = True
            nvec = f.get("spaces.action.nvec", "list")
            if not nvec or len(nvec) > MAX_DIM or not all(_is_int(v) and 1 <= v <= MAX_DIM for v in nvec):
                raise ExportError(f"{MANIFEST}: field 'spaces.action.nvec' is {_short(nvec)}, expected 1..{MAX_DIM} "
                                  f"positive choice counts")
            self.nvec = np.asarray(nvec, np.int64)
            self.n_actions = len(nvec)
        elif kind == "Box":
            self.discrete = False
            ashape = f.get("spaces.action.shape", "list")
            if len(ashape) != 1 or not _is_int(ashape[0]) or not 1 <= ashape[0] <= MAX_DIM:
                raise ExportError(f"{MANIFEST}: field 'spaces.action.shape' is {_short(ashape)}, expected [n]")
            self.n_actions = ashape[0]
            self.act_low = _bounds(f, "spaces.action.low", self.n_actions, True)
            self.act_high = _bounds(f, "spaces.action.high", self.n_actions, True)
            if (self.act_low > self.act_high).any():
                raise ExportError(f"{MANIFEST}: field 'spaces.action.low' exceeds 'spaces.action.high'")
        else:
            raise ExportError(f"{MANIFEST}: field 'spaces.action.type' is {_short(kind)}, expected Discrete, Box, "
                              f"MultiDiscrete or MultiBinary")
        # export
        formats = f.get("export.formats", "list")
        if not formats or not all(isinstance(x, str) and x in FORMAT_FILE for x in formats) or len(set(formats)) != len(formats):
            raise ExportError(f"{MANIFEST}: field 'export.formats' is {_short(formats)}, expected distinct names of "
                              f"{', '.join(FORMAT_FILE)}")
        self.formats = list(formats)
        self.precision = f.get("export.precision", "str")
        if self.precision not in ("fp32", "fp16"):
            raise ExportError(f"{MANIFEST}: field 'export.precision' is {_short(self.precision)}, expected fp32 or fp16")
        f.get("export", "dict")
        if "batch" not in manifest["export"]:
            raise ExportError(f"{MANIFEST}: missing field 'export.batch'")
        batch = manifest["export"]["batch"]
        if batch == "dynamic":
            self.batch = None
        elif _is_int(batch) and 1 <= batch <= MAX_BATCH:
            self.batch = batch
        else:
            raise ExportError(f"{MANIFEST}: field 'export.batch' is {_short(batch)}, expected 'dynamic' or 1..{MAX_BATCH}")
        self.golden_batch = f.int_in("export.golden_batch", 1, MAX_BATCH)
        if self.batch is not None and self.golden_batch != self.batch:
            raise ExportError(f"{MANIFEST}: 'export.golden_batch' {self.golden_batch} differs from the fixed "
                              f"'export.batch' {self.batch}")
        self.onnx_batch: Any = None
        if "onnx" in self.formats:
            ob = f.get("export.onnx", "dict").get("batch")
            if ob == "dynamic":
                self.onnx_batch = None
            elif _is_int(ob) and ob == self.golden_batch:
                self.onnx_batch = ob
            else:
                raise ExportError(f"{MANIFEST}: field 'export.onnx.batch' is {_short(ob)}, expected 'dynamic' or "
                                  f"the golden batch {self.golden_batch}")
        # io
        in_shape = f.get("io.input.shape", "list")
        want_b = None if self.batch is None else self.batch
        if in_shape != [want_b, self.obs_dim]:
            raise ExportError(f"{MANIFEST}: field 'io.input.shape' is {_short(in_shape)}, but the observation space "
                              f"and export batch give {_short([want_b, self.obs_dim])}")
        if f.get("io.input.dtype", "str") != self.input_dtype:
            raise ExportError(f"{MANIFEST}: field 'io.input.dtype' must be {self.input_dtype} for a {obs_type} "
                              f"observation")
        self.input_name = f.get("io.input.name", "str")
        out_shape = f.get("io.output.shape", "list")
        want_out = [want_b] + ([] if kind == "Discrete" else [self.n_actions])
        if out_shape != want_out:
            raise ExportError(f"{MANIFEST}: field 'io.output.shape' is {_short(out_shape)}, but the action space "
                              f"and export batch give {_short(want_out)}")
        out_dtype = f.get("io.output.dtype", "str")
        if out_dtype != ("int32" if self.discrete else "float32"):
            raise ExportError(f"{MANIFEST}: field 'io.output.dtype' is {_short(out_dtype)}, but the action space "
                              f"is {kind}")
        # files
        files = f.get("files", "dict")
        if len(files) > MAX_FILES:
            raise ExportError(f"{MANIFEST}: field 'files' lists {len(files)} files (at most {MAX_FILES})")
        for name, digest in files.items():
            if not plain_name(name) or name == MANIFEST:
                raise ExportError(f"{MANIFEST}: file name {_short(name)} is not a plain file name inside the "
                                  f"export directory")
            if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
                raise ExportError(f"{MANIFEST}: sha256 of {name} is {_short(digest)}, expected 64 hex digits")
        self.files: Dict[str, str] = dict(files)
        for fmt in self.formats:
            if FORMAT_FILE[fmt] not in self.files:
                raise ExportError(f"{MANIFEST}: export.formats has {fmt} but 'files' does not list {FORMAT_FILE[fmt]}")
        # golden
        self.golden_file = f.get("golden.file", "str")
        if self.golden_file not in self.files:
            raise ExportError(f"{MANIFEST}: the golden set {_short(self.golden_file)} is not listed in 'files'")
        self.golden_count = f.int_in("golden.count", 1, MAX_GOLDEN)
        if f.int_in("golden.batch", 1, MAX_BATCH) != self.golden_batch:
            raise ExportError(f"{MANIFEST}: 'golden.batch' differs from 'export.golden_batch' {self.golden_batch}")
        nbytes = self.golden_count * (row_bytes + 4 * (1 if kind == "Discrete" else self.n_actions))
        if nbytes > memory_bytes() // 2:
            raise ExportError(f"{MANIFEST}: the golden set declares {self.golden_count} x {self.obs_dim} values "
                              f"({nbytes} bytes; half of this machine's memory is {memory_bytes() // 2})")

    # -- files --------------------------------------------------------------------------------
    def path(self, name: str) -> str:
        """The path of a listed, present, regular file inside the directory (no link leading out)."""
        if name not in self.files:
            raise ExportError(f"{name}: not listed in {MANIFEST} (exported formats: {', '.join(self.formats)})")
        return _inside(self.dir, self.root, name, f"listed in {MANIFEST} but ")

    def check_hashes(self) -> Dict[str, str]:
        for name, expected in sorted(self.files.items()):
            actual = file_sha256(self.path(name))
            if actual != expected:
                raise ExportError(f"{name}: sha256 {actual} does not match the manifest's {expected} "
                                  f"(the file was modified or corrupted after export)")
        return dict(self.files)

    @property
    def dynamic(self) -> bool:
        return self.batch is None

    def fixed_batch(self, backend: str) -> Optional[int]:
        """The batch the backend's artifact must be called with (None: any)."""
        if backend == "onnxruntime":
            return self.onnx_batch
        if backend == "om":
            return self.golden_batch
        return self.batch

    def default_atol(self, backend: str) -> float:
        return default_atol(backend, self.precision)

    # -- golden set ---------------------------------------------------------------------------
    def golden(self) -> Tuple[np.ndarray, np.ndarray]:
        """(obs, actions) of golden.npz, checked against the manifest before anything is allocated."""
        name = self.golden_file
        path = self.path(name)
        want = {"obs": ((self.golden_count, self.obs_dim), np.dtype(self.input_dtype)),
                "actions": (((self.golden_count,), np.dtype(np.int32)) if self.act_kind == "Discrete"
                            else ((self.golden_count, self.n_actions), np.dtype(np.int32 if self.discrete else np.float32)))}
        size = os.path.getsize(path)
        try:
            with zipfile.ZipFile(path) as z:
                for key, (shape, dtype) in want.items():
                    try:
                        info = z.getinfo(key + ".npy")
                    except KeyError:
                        raise ExportError(f"{name}: no '{key}' array") from None
                    with z.open(info) as fh:
                        version = np.lib.format.read_magic(fh)
                        if version == (1, 0):
                            hshape, fortran, hdtype = np.lib.format.read_array_header_1_0(fh)
                        elif version == (2, 0):
                            hshape, fortran, hdtype = np.lib.format.read_array_header_2_0(fh)
                        else:
                            raise ExportError(f"{name}: '{key}' has .npy format {version}, expected 1.0 or 2.0")
                    if hdtype.hasobject or hdtype.newbyteorder("=") != dtype.newbyteorder("=") or hdtype.byteorder == ">":
                        raise ExportError(f"{name}: '{key}' has dtype {hdtype}, expected {dtype} (manifest: "
                                          f"{self.act_kind} actions)")
                    if tuple(hshape) != shape:
                        raise ExportError(f"{name}: '{key}' has shape {tuple(hshape)}, but the manifest gives {shape}")
                    nbytes = int(np.prod(shape)) * dtype.itemsize
                    ratio = 1 if info.compress_type == zipfile.ZIP_STORED else 1100
                    if info.compress_size > size or nbytes > info.file_size or nbytes > ratio * info.compress_size + 4096:
                        raise ExportError(f"{name}: '{key}' declares {nbytes} bytes of data the file does not hold")
            with np.load(path, allow_pickle=False) as z:
                obs, actions = z["obs"], z["actions"]
        except ExportError:
            raise
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, RuntimeError, SyntaxError) as exc:
            raise ExportError(f"{name}: not a readable golden set ({_one_line(exc)})") from None
        if not np.isfinite(obs).all():
            raise ExportError(f"{name}: 'obs' holds non-finite values")
        cols = column_n(self.obs_n, self.obs_parts, self.obs_dim)
        if cols.any():
            idx = obs[:, cols > 0]
            if (idx < 0).any() or (idx >= cols[cols > 0]).any() or (idx != np.round(idx)).any():
                raise ExportError(f"{name}: 'obs' holds values that are not indices of the Discrete observation "
                                  f"space(s) {_short(cols[cols > 0].tolist())}")
        if self.nvec is not None and (actions.min() < 0 or (actions >= self.nvec).any()):
            raise ExportError(f"{name}: 'actions' holds values outside 0..nvec-1 (nvec {self.nvec.tolist()})")
        elif self.nvec is None and self.discrete and (actions.min() < 0 or actions.max() >= self.n_actions):
            raise ExportError(f"{name}: 'actions' holds indices outside 0..{self.n_actions - 1}")
        if not self.discrete and not np.isfinite(actions).all():
            raise ExportError(f"{name}: 'actions' holds non-finite values")
        return np.ascontiguousarray(obs, self.input_dtype), np.ascontiguousarray(actions)


def _inside(directory: str, root: str, name: str, prefix: str = "") -> str:
    path = os.path.join(directory, name)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ExportError(f"{name}: {prefix}missing from {directory}") from None
    except OSError as exc:
        raise ExportError(f"{name}: cannot be read ({_one_line(exc)})") from None
    if stat.S_ISLNK(st.st_mode):
        real = os.path.realpath(path)
        if os.path.commonpath([real, root]) != root:
            raise ExportError(f"{name}: a link leading out of the export directory (to {real})")
        try:
            st = os.stat(real)
        except OSError:
            raise ExportError(f"{name}: a broken link") from None
    if not stat.S_ISREG(st.st_mode):
        raise ExportError(f"{name}: not a regular file")
    return path


def default_atol(backend: str, precision: str = "fp32", against: str = "train") -> float:
    """The default tolerance between ``backend``'s actions and ``against``'s: 0 (bit-identical)
    where MindSpore computes both in fp32 at the same batch shape, else CROSS_RUNTIME_ATOL.
    Discrete actions are always compared for equality."""
    same_engine = backend == "mindspore" and against in ("train", "mindspore")
    return 0.0 if same_engine and precision == "fp32" else CROSS_RUNTIME_ATOL


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_manifest_json(directory: str) -> dict:
    """manifest.json of ``directory`` parsed (regular file, bounded size, a JSON object)."""
    if not os.path.isdir(directory):
        raise ExportError(f"{directory}: no such export directory")
    path = _inside(directory, os.path.realpath(directory), MANIFEST)
    if os.path.getsize(path) > MAX_MANIFEST_BYTES:
        raise ExportError(f"{MANIFEST}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        with open(path, "rb") as fh:
            d = json.loads(fh.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ExportError(f"{path} is not valid JSON: {_one_line(exc)}") from None
    if not isinstance(d, dict):
        raise ExportError(f"{MANIFEST}: expected a JSON object")
    return d


def open_export(directory: str, backend: Optional[str] = None, hashes: bool = True, golden: bool = True,
                manifest: Optional[dict] = None) -> Export:
    """Validate an export directory before anything runs: manifest fields and their consistency,
    file names, presence and sha256, golden set headers; raises ExportError (exit 2). The
    backend's model file must be listed; loading it is :func:`make_runner`'s job."""
    export = Export(directory, read_manifest_json(directory) if manifest is None else manifest)
    if hashes:
        export.check_hashes()
    if golden:
        export.golden()
    if backend is not None:
        b = canonical_backend(backend)
        name = MODEL_FILE[b]
        if name not in export.files:
            hint = "; export again with --format mindir,onnx" if name.endswith(".onnx") else ""
            raise ExportError(f"{name}: not in this export (formats: {', '.join(export.formats)}), needed by "
                              f"backend {b}{hint}")
    return export


# -- backends -----------------------------------------------------------------------------------
class Runner:
    """A loaded model: ``run(x)`` on float32 (B, obs_dim) at ``fixed_batch`` rows (None: any)."""

    def __init__(self, backend: str, run: Callable[[np.ndarray], np.ndarray], fixed_batch: Optional[int],
                 info: Optional[dict] = None):
        self.backend = backend
        self.run = run
        self.fixed_batch = fixed_batch
        self.info = info or {}


def _import(module: str, backend: str):
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise BackendUnavailable(f"backend {backend} needs {module}, which is not installed; install "
                                 f"{INSTALL[backend]}") from None


def make_runner(export: Export, backend: str, *, target: str = "cpu", device_id: int = 0,
                precision_mode: Optional[str] = None, threads: int = 1, configure=None, probe: bool = True) -> Runner:
    """Load the backend's model file of a validated export. Load failures and a model that does
    not run on the manifest's input shape raise ExportError naming the file."""
    backend = canonical_backend(backend)
    name = MODEL_FILE[backend]
    path = export.path(name)
    fixed = export.fixed_batch(backend)
    loader = {"onnxruntime": _onnxruntime, "mindspore": _mindspore, "mindspore_lite": _lite, "om": _om}[backend]
    try:
        run, info = loader(path, fixed, target=target, device_id=device_id, precision_mode=precision_mode,
                           threads=threads, configure=configure)
    except ExportError:
        raise
    except Exception as exc:  # every library has its own exception types for a broken model
        raise ExportError(f"{name}: backend {backend} cannot load it ({_one_line(exc)})") from None
    runner = Runner(backend, run, fixed, info)
    if probe:  # the manifest's input shape; a dynamic batch claim is probed at two sizes
        for b in ([fixed] if fixed else sorted({export.golden_batch, 3})):
            x = np.zeros((b, export.obs_dim), export.input_dtype)
            try:
                out = np.asarray(run(x))
            except Exception as exc:
                raise ExportError(f"{name}: backend {backend} loads it but cannot run it on the manifest's input "
                                  f"shape {[b if fixed else None, export.obs_dim]} at batch {b} ({_one_line(exc)})") from None
            if out.ndim < 1 or out.shape[0] != b:
                raise ExportError(f"{name}: returns shape {list(out.shape)} for a batch of {b}")
    return runner


def _onnxruntime(path, fixed, threads=1, **_):
    ort = _import("onnxruntime", "onnxruntime")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name

    def run(x):
        return session.run(None, {input_name: x})[0]
    return run, {"input": input_name, "version": ort.__version__}


def _mindspore(path, fixed, configure=None, **_):
    ms = _import("mindspore", "mindspore")
    from mindspore import Tensor, nn
    if configure is not None:
        configure()
    else:
        # GRAPH_MODE, CPU, deterministic kernels; each refused call means the process already
        # configured MindSpore (a caller's own code), which is left as it is.
        for call in (lambda: ms.set_context(mode=ms.GRAPH_MODE), lambda: ms.set_device("CPU"),
                     lambda: ms.set_deterministic(True)):
            try:
                call()
            except (RuntimeError, ValueError):
                pass
    with _quiet_fd2():  # MindSpore logs a broken file's parse errors from C++; the error message says it once
        graph = nn.GraphCell(ms.load(path))

    def run(x):
        return graph(Tensor(x)).asnumpy()
    return run, {"version": ms.__version__}


class _quiet_fd2:
    """Silence file descriptor 2 (C++ library logs) for a block; what was written is re-emitted
    only when the block succeeds."""

    def __enter__(self):
        import tempfile
        try:
            sys.stderr.flush()
            self.saved = os.dup(2)
            self.tmp = tempfile.TemporaryFile()
            os.dup2(self.tmp.fileno(), 2)
        except (OSError, ValueError, AttributeError):
            self.saved = None
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.saved is None:
            return False
        os.dup2(self.saved, 2)
        os.close(self.saved)
        if exc_type is None:
            self.tmp.seek(0)
            data = self.tmp.read(1 << 16)
            if data:
                os.write(2, data)
        self.tmp.close()
        return False


def lite_context(mslite, target: str = "cpu", device_id: int = 0, precision_mode: Optional[str] = None):
    """A mindspore_lite.Context with an explicit precision mode (never Lite's fp16 default on Ascend)."""
    if target not in ("cpu", "ascend"):
        raise ExportError(f"lite target must be 'cpu' or 'ascend', got {target!r}")
    context = mslite.Context()
    context.target = [target]
    mode = precision_mode or "enforce_fp32"
    if target == "ascend":
        if mode not in LITE_ASCEND_PRECISION_MODES:
            raise ExportError(f"lite ascend precision_mode must be one of {LITE_ASCEND_PRECISION_MODES}, got {mode!r}")
        context.ascend.device_id = int(device_id)
        context.ascend.precision_mode = mode
    else:
        if mode not in LITE_CPU_PRECISION_MODES:
            raise ExportError(f"lite cpu precision_mode must be one of {LITE_CPU_PRECISION_MODES}, got {mode!r}")
        context.cpu.precision_mode = mode
        context.cpu.thread_num = 1
    return context, mode


def _lite(path, fixed, target="cpu", device_id=0, precision_mode=None, **_):
    mslite = _import("mindspore_lite", "mindspore_lite")
    context, mode = lite_context(mslite, target, device_id, precision_mode)
    model = mslite.Model()
    model.build_from_file(path, mslite.ModelType.MINDIR, context)
    inputs = model.get_inputs()
    state = {"shape": None}

    def run(x):
        if state["shape"] != x.shape:
            model.resize(inputs, [list(x.shape)])
            state["shape"] = x.shape
        inputs[0].set_data_from_numpy(x)
        return model.predict(inputs)[0].get_data_to_numpy()
    return run, {"target": target, "precision_mode": mode, "device_id": int(device_id)}


def _om(path, fixed, device_id=0, **_):
    """actor.om through ais_bench's InferSession, or aclruntime's InferenceSession where only that is installed."""
    import importlib
    try:
        interface = importlib.import_module("ais_bench.infer.interface")
    except ImportError:
        interface = None
    if interface is not None:
        session = interface.InferSession(int(device_id), path)

        def run(x):
            return np.asarray(session.infer([x], mode="static")[0])
        return run, {"api": "ais_bench.infer.interface.InferSession", "device_id": int(device_id)}
    try:
        acl = importlib.import_module("aclruntime")
    except ImportError:
        raise BackendUnavailable(f"backend om needs ais_bench (or aclruntime), which is not installed; install "
                                 f"{INSTALL['om']}") from None
    options = acl.session_options()
    session = acl.InferenceSession(path, int(device_id), options)
    out_names = [o.name for o in session.get_outputs()]

    def run(x):
        t = acl.Tensor(np.ascontiguousarray(x))
        t.to_device(int(device_id))
        outs = session.run(out_names, [t])
        outs[0].to_host()
        return np.array(outs[0])
    return run, {"api": "aclruntime.InferenceSession", "device_id": int(device_id)}


# -- the policy ---------------------------------------------------------------------------------
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


class Policy:
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

    @property
    def obs_dim(self) -> int:
        return self._obs_dim

    def image_text(self) -> str:
        shape = tuple(self.image["shape"])
        return f"Image{shape} uint8 frames (values 0..255) of shape {shape} or (batch, {', '.join(map(str, shape))})"

    def _pixels(self, arr: np.ndarray, obs, width: int, what: str) -> np.ndarray:
        """uint8 rows (B, width) from pixel values: uint8, or integers / floats that are integral in 0..255."""
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
            raise ValueError(f"expected {what}, got dtype {arr.dtype}")
        if arr.dtype != np.uint8:
            flat = arr.astype(np.float64).reshape(-1)
            bad = np.nonzero(~np.isfinite(flat) | (flat < 0) | (flat > 255) | (flat != np.round(flat)))[0]
            if bad.size:
                raise ValueError(f"expected {what}, got {flat[bad[0]]:g} at flat index {int(bad[0])}")
        return np.ascontiguousarray(arr.reshape(-1, width), dtype=np.uint8)

    def frames(self, obs) -> Tuple[np.ndarray, bool]:
        """One observation or a batch as frame rows (B, frame_dim), and whether it was one."""
        arr = np.asarray(obs)
        if self.image is not None:
            shape = tuple(self.image["shape"])
            what = self.image_text()
            if arr.shape in (shape, (self.frame_dim,)):
                single = True
            elif arr.ndim >= 2 and arr.shape[1:] in (shape, (self.frame_dim,)) and arr.shape[0] >= 1:
                single = False
            else:
                raise ValueError(f"expected {what}, got shape {arr.shape}")
            return self._pixels(arr, obs, self.frame_dim, what), single
        if arr.ndim not in (1, 2) or arr.shape[-1] != self.frame_dim:
            raise ValueError(f"expected float32 observations of shape ({self.frame_dim},) or (batch, {self.frame_dim}) "
                             f"(this policy stacks the {self.frame_stack} latest itself), got shape {arr.shape}")
        rows = arr.reshape(-1, self.frame_dim)
        if rows.dtype == object or not np.issubdtype(rows.dtype, np.floating) or not np.all(np.isfinite(rows)):
            raise ValueError(f"expected finite float32 observations of shape ({self.frame_dim},) or (batch, "
                             f"{self.frame_dim}), got dtype {rows.dtype}")
        return np.ascontiguousarray(rows, np.float32), arr.ndim == 1

    def reset_frames(self) -> None:
        """Start new episodes: the frame stack restarts (zeros, then the next observation)."""
        if self._stack is not None:
            self._stack.buf = None

    def validate(self, obs) -> np.ndarray:
        arr = np.asarray(obs)
        if self.obs_n:
            return self._validate_index(arr, obs)
        if self.image is not None:  # model-input rows: k frames of raw pixels
            what = f"uint8 rows of shape (batch, {self.obs_dim}) ({self.frame_stack} x {self.image_text()})"
            if arr.ndim == 1:
                arr = arr.reshape(1, -1)
            if arr.ndim != 2 or arr.shape[1] != self.obs_dim or arr.shape[0] < 1:
                raise ValueError(f"expected {what}, got shape {np.shape(obs)}")
            return self._pixels(arr, obs, self.obs_dim, what)
        expected = f"float32 observations of shape ({self.obs_dim},) or (batch, {self.obs_dim})"
        if self.obs_parts:
            expected = f"a dict observation of {space_text(0, self.obs_parts)} or its packed {expected}"
        if arr.dtype == object or not np.issubdtype(arr.dtype, np.floating):
            raise ValueError(f"expected {expected}, got dtype {arr.dtype}")
        if arr.ndim == 1:
            arr = arr.reshape(1, -1)
        if arr.ndim != 2 or arr.shape[1] != self.obs_dim or arr.shape[0] < 1:
            raise ValueError(f"expected {expected}, got shape {np.shape(obs)}")
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if not np.all(np.isfinite(arr)):
            bad = np.argwhere(~np.isfinite(arr))[0]
            raise ValueError(f"expected finite observations, got {arr[tuple(bad)]} at index {tuple(int(i) for i in bad)}")
        if self.obs_parts:  # the packed row of a Dict: its Discrete columns hold indices
            d = self._cols > 0
            idx = arr[:, d]
            bad = np.argwhere(not_an_index(idx, self._cols[d]))
            if bad.size:
                col = int(np.nonzero(d)[0][bad[0][1]])
                raise ValueError(f"expected {space_text(0, self.obs_parts)} observations: column {col} of the packed "
                                 f"row holds a Discrete index, got {arr[bad[0][0], col]}")
        return arr

    def pack(self, obs) -> Tuple[np.ndarray, bool]:
        """A Dict observation (a dict of one observation per key, or of batches with a leading
        batch axis) -> (its packed rows (B, obs_dim) in the manifest's sorted key order, single)."""
        expected = space_text(0, self.obs_parts)
        if not isinstance(obs, dict):
            raise ValueError(f"expected a dict observation of {expected} (or its packed float32 rows of shape "
                             f"(batch, {self.obs_dim})), got {type(obs).__name__}")
        keys = [p[0] for p in self.obs_parts]
        missing = [k for k in keys if k not in obs]
        extra = sorted(str(k) for k in obs if k not in keys)
        if missing or extra:
            raise ValueError(f"expected a dict observation of {expected}: missing keys {missing}, unexpected keys {extra}")
        cols, single, rows = [], None, None
        for key, kind, n, shape in self.obs_parts:
            v = np.asarray(obs[key])
            if v.dtype == object or not (np.issubdtype(v.dtype, np.integer) or np.issubdtype(v.dtype, np.floating)
                                         or v.dtype == bool):
                raise ValueError(f"key {key!r} of {expected}: expected numbers, got dtype {v.dtype}")
            if kind == "Discrete":
                if v.ndim > 2 or (v.ndim == 2 and v.shape[1] != 1):
                    raise ValueError(f"key {key!r} of {expected}: expected a Discrete({n}) index or a batch of them "
                                     f"(batch,), got shape {v.shape}")
                one = v.ndim == 0
                flat = v.reshape(-1, 1).astype(np.float64)
                bad = np.nonzero(not_an_index(flat[:, 0], n))[0]
                if bad.size:
                    raise ValueError(f"key {key!r} of {expected}: expected a Discrete({n}) index 0..{n - 1}, "
                                     f"got {flat[bad[0], 0]:g}")
            else:
                w = int(np.prod(shape))
                if v.shape in (tuple(shape), (w,)):
                    one, flat = True, v.reshape(1, w)
                elif v.ndim >= 2 and (v.shape[1:] == tuple(shape) or v.shape[1:] == (w,)):
                    one, flat = False, v.reshape(len(v), w)
                else:
                    raise ValueError(f"key {key!r} of {expected}: expected shape {tuple(shape)} or (batch, "
                                     f"{', '.join(map(str, shape))}), got {v.shape}")
            if single is None:
                single, rows = one, len(flat)
            elif one != single or len(flat) != rows:
                raise ValueError(f"key {key!r} of {expected}: {len(flat)} observation(s), the keys before it "
                                 f"hold {rows}: every key needs the same batch")
            cols.append(flat.astype(np.float32))
        return np.concatenate(cols, axis=1), bool(single)

    def _validate_index(self, arr: np.ndarray, obs) -> np.ndarray:
        """A Discrete(n) observation: integer indices, one (a scalar) or a batch (B,) or (B, 1)."""
        n = self.obs_n
        expected = (f"Discrete({n}) observations: integer indices 0..{n - 1}, one (a scalar) or a batch of "
                    f"shape (batch,) or (batch, 1)")
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
            raise ValueError(f"expected {expected}, got dtype {arr.dtype}")
        if arr.ndim > 2 or (arr.ndim == 2 and arr.shape[1] != 1) or arr.size < 1:
            raise ValueError(f"expected {expected}, got shape {np.shape(obs)}")
        flat = arr.reshape(-1)
        bad = np.nonzero(not_an_index(flat, n))[0]
        if bad.size:
            raise ValueError(f"expected {expected}, got {flat[bad[0]]} at index {int(bad[0])}")
        return np.ascontiguousarray(flat.reshape(-1, 1), dtype=np.float32)

    def is_single(self, obs) -> bool:
        """Whether ``obs`` is one observation (its action is returned without the batch axis)."""
        return np.ndim(obs) == (0 if self.obs_n else 1)

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

    def __init__(self, fallback: Optional[Policy] = None, latency_budget_ms: Optional[float] = None,
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

    def run(self, policy: Policy, x: np.ndarray) -> np.ndarray:
        n = len(x)
        self.calls += 1
        primary = self.fallback if self.switched else policy
        t0 = time.perf_counter()
        try:
            out = primary.run_batched(x)
            kind = policy.action_violation(out, n)
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
        out = self.fallback.run_batched(x)
        kind2 = policy.action_violation(out, n)
        if kind2 is not None:
            raise GuardError(f"guarded policy: backend {primary.backend} returned {detail}, and the fallback "
                             f"{self.fallback.backend} returned {kind2}")
        return out

    def stats(self) -> dict:
        lat = np.asarray(self.latencies, np.float64) * 1e6
        return {"calls": self.calls, "violations": dict(self.violations), "fallbacks": self.fallbacks,
                "fallback_backend": None if self.fallback is None else self.fallback.backend,
                "switched_to_fallback": self.switched, "last_violation": self.last_violation,
                "latency_budget_ms": None if self.budget is None else self.budget * 1e3,
                "latency_us": {"p50": float(np.percentile(lat, 50)) if lat.size else None,
                               "p99": float(np.percentile(lat, 99)) if lat.size else None}}


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


# -- frame stacking -----------------------------------------------------------------------------
class FrameStack:
    """The k most recent observation rows of each of B streams, oldest first, concatenated:
    (B, k * d). A stream starts (and restarts, ``reset_mask``) with zeros and its first row last,
    as Stable-Baselines3's VecFrameStack. What cannot be a pure function of one frame lives here,
    outside the policy cell; the training loop (algorithms/on_policy.py), the episode runner and
    the deployed ``Policy.act`` all use this class, and the manifest records it
    (``spaces.observation.frame_stack``: kind, k, order) so load_policy / verify reproduce it."""

    KIND = "frame_stack"
    ORDER = "oldest_first"

    def __init__(self, k: int, width: int):
        self.k, self.width = int(k), int(width)
        self.buf: Optional[np.ndarray] = None

    def reset(self, rows: np.ndarray) -> np.ndarray:
        """Start every stream with ``rows`` (B, d); returns the stacked rows (B, k * d)."""
        rows = np.asarray(rows)
        self.buf = np.zeros((len(rows), self.k * self.width), rows.dtype)
        self.buf[:, -self.width:] = rows
        return self.buf.copy()

    def push(self, rows: np.ndarray, reset_mask: Optional[np.ndarray] = None) -> np.ndarray:
        """Append ``rows``; the streams of ``reset_mask`` restart (zeros, then the row)."""
        rows = np.asarray(rows)
        if self.buf is None or len(self.buf) != len(rows):
            return self.reset(rows)
        self.buf[:, :-self.width] = self.buf[:, self.width:].copy()
        self.buf[:, -self.width:] = rows
        if reset_mask is not None and np.any(reset_mask):
            self.buf[np.asarray(reset_mask, bool), :-self.width] = 0
        return self.buf.copy()

    def peek(self, rows: np.ndarray) -> np.ndarray:
        """The stacked rows ``push(rows)`` would give, without changing the state (the true final
        observation of an ended episode, for the value bootstrap)."""
        rows = np.asarray(rows)
        out = np.empty_like(self.buf)
        out[:, :-self.width] = self.buf[:, self.width:]
        out[:, -self.width:] = rows
        return out

    def spec(self) -> dict:
        return {"kind": self.KIND, "k": self.k, "order": self.ORDER}


class MaxAndSkip:
    """Action repeat with flicker removal, exactly as Stable-Baselines3's MaxAndSkipEnv (Atari):
    every agent action is sent ``skip`` times to an environment that renders every frame, the
    rewards are summed, and the observation is the pixel-wise maximum of a two-frame buffer that
    receives the repeat's frames ``skip - 2`` and ``skip - 1``. The buffer lives across repeats and
    episodes, as SB3's ``_obs_buffer``: when an episode ends early in a repeat, the frames the
    repeat did not reach are still the previous repeat's (so the terminal observation is SB3's,
    frame for frame; only a truncated episode's bootstrap value reads it). It spans emulator
    frames, so it cannot be in the policy cell: the training environment (envs.MaxAndSkipEnv), the
    evaluation episodes and a deployment loop all call :meth:`repeat`, one object per environment;
    the manifest records it (``spaces.observation.max_and_skip``: kind, skip, pool) and
    ``Policy.max_and_skip`` gives it back to the deploying code::

        obs, reward, terminated, truncated, info = policy.max_and_skip.repeat(device_step, action)
    """

    KIND = "max_and_skip"
    POOL = "max_last_2"

    def __init__(self, skip: int):
        if int(skip) < 2:
            raise ValueError(f"max-and-skip needs skip >= 2, got {skip}")
        self.skip = int(skip)
        self.frames: Optional[np.ndarray] = None  # SB3's _obs_buffer, zeros until the first frame

    def repeat(self, step, action):
        """``step(action)`` (gymnasium's 5-tuple) up to ``skip`` times, stopping where the episode
        ends: (pooled observation, summed reward, terminated, truncated, the last info)."""
        total = 0.0
        for i in range(self.skip):
            obs, reward, terminated, truncated, info = step(action)
            if self.frames is None:
                self.frames = np.zeros((2,) + np.shape(obs), np.asarray(obs).dtype)
            if i >= self.skip - 2:
                self.frames[i - self.skip + 2] = obs
            total += float(reward)
            if terminated or truncated:
                break
        return self.frames.max(axis=0), total, terminated, truncated, info

    def spec(self) -> dict:
        return {"kind": self.KIND, "skip": self.skip, "pool": self.POOL}


# -- checking -----------------------------------------------------------------------------------
def compare_actions(pred: np.ndarray, ref: np.ndarray, discrete: bool, atol: float) -> dict:
    """The golden-set comparison of ``msrl verify`` and ``check``: discrete actions identical,
    continuous ones within ``atol`` (0: bitwise)."""
    pred = np.asarray(pred)
    ref = np.asarray(ref)
    if pred.shape != ref.shape:
        return {"shape_mismatch": True, "pred_shape": list(pred.shape), "ref_shape": list(ref.shape),
                "passed": False, "first_mismatch": 0}
    out: Dict[str, Any] = {"count": int(len(ref))}
    if discrete:  # per row: a MultiDiscrete / MultiBinary action agrees when every dimension does
        equal = (pred.astype(np.int64) == ref.astype(np.int64)).reshape(len(ref), -1).all(axis=1)
        out["agreement"] = float(equal.mean())
        bad = np.nonzero(~equal)[0]
        out["first_mismatch"] = int(bad[0]) if bad.size else None
        out["passed"] = bool(equal.all())
        out["bit_identical"] = bool(np.array_equal(pred, ref) and pred.dtype == ref.dtype)
        return out
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(pred.astype(np.float64) - ref.astype(np.float64))
        err = np.where(np.isnan(err), np.inf, err)
        rel = err / np.maximum(np.abs(ref.astype(np.float64)), 1e-8)
    row_err = err.reshape(len(err), -1).max(axis=1)
    bad = np.nonzero(row_err > atol)[0]
    out.update({"max_abs_error": float(err.max()), "mean_abs_error": float(err.mean()),
                "max_rel_error": float(rel.max()), "bit_identical": bool(np.array_equal(pred, ref)),
                "first_mismatch": int(bad[0]) if bad.size else None, "passed": bool(bad.size == 0)})
    return out


def golden_check(policy: Policy, export: Export, atol: float) -> dict:
    """The golden set at the exported batch shape against the training cell's recorded actions."""
    obs, ref = export.golden()
    try:
        pred = np.asarray(policy.act_at_batch(obs, export.golden_batch))
    except (ValueError, TypeError, IndexError) as exc:  # outputs that do not even concatenate
        pred = None
        res = {"passed": False, "shape_mismatch": True, "first_mismatch": 0,
               "output_mismatch": f"artifact outputs are not a batch of actions ({_one_line(exc)})"}
    except Exception as exc:
        name = MODEL_FILE.get(getattr(policy, "runner", None) and policy.runner.backend, "the model")
        raise ExportError(f"{name}: backend {policy.backend} failed on the golden set ({_one_line(exc)})") from None
    if pred is not None:
        res = compare_actions(pred, ref, export.discrete, atol)
        if not res.get("shape_mismatch") and pred.dtype.kind != ref.dtype.kind:
            res["passed"] = False
        if res.get("shape_mismatch") or pred.dtype.kind != ref.dtype.kind:
            res["output_mismatch"] = (f"artifact returns {pred.dtype} {list(pred.shape)}, the training cell "
                                      f"{ref.dtype} {list(ref.shape)}")
    res["batch"] = export.golden_batch
    return res


def latency(policy: Policy, obs: np.ndarray, batch: int, seconds: float = 1.0, min_calls: int = 30) -> dict:
    rows = np.resize(obs, (batch, obs.shape[1])).astype(obs.dtype)
    # ``obs`` are model-input rows (golden set); with frame stacking they hold k frames, which act()
    # (it takes one frame and stacks it) does not take: time validation + model on the rows instead
    call = policy.act if policy.frame_stack == 1 else (lambda r: policy.run_batched(policy.validate(r)))
    times = []
    t_end = time.perf_counter() + seconds
    while len(times) < min_calls or (time.perf_counter() < t_end and len(times) < 10_000):
        t0 = time.perf_counter()
        call(rows)
        times.append(time.perf_counter() - t0)
    us = np.asarray(times) * 1e6
    return {"batch": batch, "calls": len(times), "p50_us": float(np.percentile(us, 50)),
            "p99_us": float(np.percentile(us, 99))}


def check(directory: str, backend: Optional[str] = None, atol: Optional[float] = None, target: str = "cpu",
          device_id: int = 0, precision_mode: Optional[str] = None, latency_seconds: float = 0.5,
          write_report: bool = True) -> dict:
    """What ``python policy.py check`` does: integrity, golden set, latency, report-check-BACKEND.json."""
    export = open_export(directory)
    policy = load(directory, backend, target=target, device_id=device_id, precision_mode=precision_mode,
                  check_hashes=False)
    b = policy.backend
    atol = export.default_atol(b) if atol is None else float(atol)
    golden = golden_check(policy, export, atol)
    if export.precision == "fp16":
        criterion = {"name": "golden set drift (fp16 export: reported, judged by msrl verify's rollouts)",
                     "passed": True, "value": golden.get("max_abs_error", golden.get("agreement"))}
    elif export.discrete:
        criterion = {"name": "golden set discrete actions identical", "passed": bool(golden["passed"]),
                     "value": golden.get("agreement")}
    else:
        criterion = {"name": "golden set bit-identical" if atol == 0 else f"golden set within atol {atol:g}",
                     "passed": bool(golden["passed"]), "value": golden.get("max_abs_error")}
    if golden.get("output_mismatch"):
        criterion["passed"] = False
    report = {"export_dir": os.path.abspath(directory), "backend": b, "runner": policy.runner.info,
              "precision": export.precision, "atol": atol, "algorithm": export.algorithm, "env_id": export.env_id,
              "integrity": {"checked": sorted(export.files), "passed": True}, "golden": golden,
              "criteria": [criterion], "passed": bool(criterion["passed"]),
              "python": sys.version.split()[0], "numpy": np.__version__}
    if report["passed"] and latency_seconds > 0:
        obs, _ = export.golden()
        big = policy.fixed_batch or export.golden_batch if (policy.fixed_batch or export.golden_batch) > 1 else 32
        report["latency"] = [latency(policy, obs, 1, latency_seconds)]
        if big != 1:
            report["latency"].append(latency(policy, obs, big, latency_seconds))
    if write_report:
        try:
            name = f"report-check-{b}.json"  # one per backend, beside msrl verify's report-verify-BACKEND.*
            tmp = os.path.join(directory, f".{name}.tmp-{os.getpid()}")
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(report, fh, indent=2)
                fh.write("\n")
            os.replace(tmp, os.path.join(directory, name))
            report["report"] = os.path.join(directory, name)
        except OSError as exc:
            report["report"] = f"not written ({_one_line(exc)})"
    return report


def main(argv: Optional[List[str]] = None, prog: str = "policy.py") -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(prog=prog, description="Run or check this exported policy bundle.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    c = sub.add_parser("check", help="integrity, golden set against the training cell, latency; writes report-check-BACKEND.json")
    c.add_argument("--dir", default=here, help="export directory (default: this file's directory)")
    c.add_argument("--backend", help=f"one of {', '.join(BACKENDS)} (or lite); default: the first installed")
    c.add_argument("--atol", type=float, help="tolerance for continuous actions (default 0 on mindspore, else 1e-5)")
    c.add_argument("--target", default="cpu", choices=["cpu", "ascend"], help="mindspore_lite: the device")
    c.add_argument("--precision-mode", help="mindspore_lite: explicit precision mode (default enforce_fp32)")
    c.add_argument("--device-id", type=int, default=0)
    c.add_argument("--latency-seconds", type=float, default=0.5)
    c.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = p.parse_args(argv)
    try:
        r = check(args.dir, args.backend, args.atol, args.target, args.device_id, args.precision_mode,
                  args.latency_seconds)
    except ExportError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(r))
        return EXIT_PASS if r["passed"] else EXIT_MISMATCH
    g = r["golden"]
    detail = (f"agreement {g['agreement']:.4f}" if "agreement" in g else
              f"max abs error {g['max_abs_error']:.3g}" if "max_abs_error" in g else g.get("output_mismatch", ""))
    print(f"{prog} check [{r['backend']}]: {r['algorithm']} on {r['env_id']}, sha256 of "
          f"{len(r['integrity']['checked'])} files ok; golden set {g.get('count', '?')} obs at batch {g['batch']}: {detail}")
    for lat in r.get("latency", []):
        print(f"  latency at batch {lat['batch']}: p50 {lat['p50_us']:.0f} us, p99 {lat['p99_us']:.0f} us "
              f"({lat['calls']} calls)")
    for crit in r["criteria"]:
        print(f"  [{'ok' if crit['passed'] else 'FAIL'}] {crit['name']}")
    print(f"  {'PASS' if r['passed'] else 'FAIL'}; report: {r.get('report')}")
    return EXIT_PASS if r["passed"] else EXIT_MISMATCH


if __name__ == "__main__":
    sys.exit(main())
