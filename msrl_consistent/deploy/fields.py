"""Typed, bounded access to manifest.json's fields and the observation spaces they describe."""
from __future__ import annotations

import json
from typing import Any, Dict

import numpy as np

from .errors import ExportError
from .names import MANIFEST, MAX_DIM
from .schema import SCHEMA


def plain_name(name: Any) -> bool:
    """A file name that stays inside its directory: no separator, not '.' or '..', no NUL."""
    return (isinstance(name, str) and 0 < len(name) <= 255 and name not in (".", "..")
            and not any(c in name for c in ("/", "\\", "\x00"))
            and name.isprintable())


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) or v in ("inf", "-inf")


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


PIXEL_VALUES = 256
"""An image key's ``n`` in a Dict's parts: each of its columns holds an integer 0..255."""


def image_layout(shape) -> str:
    """The layout of a uint8 image of ``shape``: "HWC" for (H, W) and (H, W, 1|3|4), "CHW" for
    (1|3|4, H, W), "" for a shape that is no image (the one rule training and deployment share)."""
    s = tuple(shape)
    if len(s) == 2 or (len(s) == 3 and s[-1] in (1, 3, 4)):
        return "HWC"
    if len(s) == 3 and s[0] in (1, 3, 4):
        return "CHW"
    return ""


def row_order(parts) -> list:
    """A Dict's parts in the order its packed row holds them: the image keys first, then the Box
    and Discrete keys, each group in sorted key order (without image keys: sorted key order).
    The exported graph takes the images as uint8 inputs and the rest as one float32 row, so
    that row is the packed row's tail."""
    parts = sorted(parts, key=lambda p: p[0])
    return [p for p in parts if p[1] == "Image"] + [p for p in parts if p[1] != "Image"]


def _dict_parts(f: "_Fields") -> list:
    """[(key, "Box" | "Discrete" | "Image", n, shape)] of a Dict observation, in the packed row's
    order (:func:`row_order`); the manifest lists the keys sorted."""
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
        elif (kind == "Image" and isinstance(sub.get("shape"), list) and len(sub["shape"]) in (2, 3)
              and all(_is_int(s) and 1 <= s <= MAX_DIM for s in sub["shape"]) and sub.get("dtype") == "uint8"
              and sub.get("layout") == image_layout(sub["shape"]) != "" and image_key(k)):
            parts.append((k, "Image", PIXEL_VALUES, tuple(sub["shape"])))
        else:
            raise ExportError(f"{MANIFEST}: field 'spaces.observation.spaces.{k}' is {_short(sub)}, expected "
                              f"{{'type': 'Box', 'shape': [...]}}, {{'type': 'Discrete', 'n': n}} or {{'type': "
                              f"'Image', 'shape': [h, w(, c)], 'layout': 'HWC' | 'CHW', 'dtype': 'uint8'}} (an image "
                              f"key of letters, digits and '_')")
    return row_order(parts)


def image_key(key: str) -> bool:
    """Whether ``key`` can name an image key: its graph input is ``obs_<key>`` (ONNX input names and
    ATC's --input_shape list take letters, digits and '_')."""
    return bool(key) and len(key) <= 64 and all(c.isascii() and (c.isalnum() or c == "_") for c in key)


def column_n(obs_n: int, obs_parts, obs_dim: int) -> np.ndarray:
    """Per column of the observation row: n of the Discrete space whose index it holds (256 for an
    image key's pixels, integers 0..255), 0 for Box values."""
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
    kinds = {"Discrete": lambda n, shape: f"Discrete({n})", "Box": lambda n, shape: f"Box{tuple(shape)}",
             "Image": lambda n, shape: f"Image{tuple(shape)} uint8"}
    return "Dict(" + ", ".join(f"{k}: " + kinds[kind](n, shape) for k, kind, n, shape in obs_parts) + ")"
