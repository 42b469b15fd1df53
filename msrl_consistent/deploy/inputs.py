"""What a deployed policy accepts: observations validated and packed per space."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .fields import PIXEL_VALUES, not_an_index, space_text


class Inputs:
    """Validation and packing of observations per space (Box, Discrete, Dict, Image), with errors
    that name the space. A base of :class:`~.policy.Policy`, which sets the attributes used here."""

    _obs_dim: int
    obs_n: int  # a Discrete observation space's n (0: not Discrete)
    image: Optional[dict]  # Image observations: {"shape": the env's frame shape, "layout": HWC | CHW}
    frame_stack: int
    frame_dim: int
    obs_parts: Optional[list]  # Dict observations: [(key, "Box" | "Discrete" | "Image", n, shape)], row order
    _cols: np.ndarray  # per column of the row: the n of the Discrete index it holds (256: a pixel), 0 for Box values

    @property
    def obs_dim(self) -> int:
        return self._obs_dim

    def image_text(self) -> str:
        shape = tuple((self.image or {}).get("shape", ()))
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
                what = "an image pixel (an integer 0..255)" if self._cols[col] == PIXEL_VALUES else "a Discrete index"
                raise ValueError(f"expected {space_text(0, self.obs_parts)} observations: column {col} of the packed "
                                 f"row holds {what}, got {arr[bad[0][0], col]}")
        return arr

    def pack(self, obs) -> Tuple[np.ndarray, bool]:
        """A Dict observation (a dict of one observation per key, or of batches with a leading
        batch axis; an image key's frames uint8) -> (its packed float32 rows (B, obs_dim) in the
        row order of obs_parts, single)."""
        parts = self.obs_parts or []
        expected = space_text(0, parts)
        if not isinstance(obs, dict):
            raise ValueError(f"expected a dict observation of {expected} (or its packed float32 rows of shape "
                             f"(batch, {self.obs_dim})), got {type(obs).__name__}")
        keys = [p[0] for p in parts]
        missing = [k for k in keys if k not in obs]
        extra = sorted(str(k) for k in obs if k not in keys)
        if missing or extra:
            raise ValueError(f"expected a dict observation of {expected}: missing keys {missing}, unexpected keys {extra}")
        cols, single, rows = [], None, None
        for key, kind, n, shape in parts:
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
                if kind == "Image":  # the raw frame: uint8, or integral values 0..255
                    flat = self._pixels(flat, obs, w, f"key {key!r} of {expected}: uint8 pixels (values 0..255)")
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
