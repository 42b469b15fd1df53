"""The golden set of an export (golden.npz): checked against the manifest from the .npy headers
before any array is allocated, read without pickle."""
from __future__ import annotations

import os
import zipfile
from typing import Dict, Tuple

import numpy as np

from .errors import ExportError, _one_line
from .fields import _short
from .sampling import GOLDEN_PREFIX, output_widths


def read_golden(export) -> Tuple[np.ndarray, np.ndarray]:
    """(obs, actions) of golden.npz, checked against the manifest before anything is allocated."""
    arrays = read_golden_arrays(export)
    return arrays["obs"], arrays["actions"]


def read_golden_arrays(export) -> Dict[str, np.ndarray]:  # noqa: C901  (each .npy header check is one branch, before allocation)
    """Every array of golden.npz, checked against the manifest before anything is allocated: obs and
    actions; for a recurrent export also episode_starts (count,) and the states h, c (count, hidden),
    rows step-major (step t of lane l is row t * lanes + l)."""
    name = export.golden_file
    path = export.path(name)
    n = export.golden_count
    spec = export.spec
    want: Dict[str, Tuple[tuple, np.dtype]] = {"obs": ((n, spec.obs_dim), np.dtype(spec.input_dtype)),
            "actions": (((n,), np.dtype(np.int32)) if spec.act_kind == "Discrete"
                        else ((n, spec.n_actions), np.dtype(np.int32 if spec.discrete else np.float32)))}
    if export.state_size:
        want.update(episode_starts=((n,), np.dtype(np.float32)), h=((n, export.state_size), np.dtype(np.float32)),
                    c=((n, export.state_size), np.dtype(np.float32)))
    if export.distribution is not None:  # the training cell's distribution outputs (deploy.sampling)
        dist = export.distribution
        for name, w in zip(dist.outputs, output_widths(dist.kind, spec, 0 if dist.sde_scale is None
                                                        else dist.sde_scale.shape[0])):
            want[GOLDEN_PREFIX + name] = ((n, w), np.dtype(np.float32))
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
                                      f"{spec.act_kind} actions)")
                if tuple(hshape) != shape:
                    raise ExportError(f"{name}: '{key}' has shape {tuple(hshape)}, but the manifest gives {shape}")
                nbytes = int(np.prod(shape)) * dtype.itemsize
                ratio = 1 if info.compress_type == zipfile.ZIP_STORED else 1100
                if info.compress_size > size or nbytes > info.file_size or nbytes > ratio * info.compress_size + 4096:
                    raise ExportError(f"{name}: '{key}' declares {nbytes} bytes of data the file does not hold")
        with np.load(path, allow_pickle=False) as z:
            arrays = {key: z[key] for key in want}
        obs, actions = arrays["obs"], arrays["actions"]
    except ExportError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, RuntimeError, SyntaxError) as exc:
        raise ExportError(f"{name}: not a readable golden set ({_one_line(exc)})") from None
    if not np.isfinite(obs).all():
        raise ExportError(f"{name}: 'obs' holds non-finite values")
    cols = spec.column_n
    if cols.any():
        idx = obs[:, cols > 0]
        if (idx < 0).any() or (idx >= cols[cols > 0]).any() or (idx != np.round(idx)).any():
            raise ExportError(f"{name}: 'obs' holds values that are not indices of the Discrete observation "
                              f"space(s) or image pixels 0..255 {_short(sorted(set(cols[cols > 0].tolist())))}")
    nvec = np.asarray(spec.nvec, np.int64)
    if spec.nvec and (actions.min() < 0 or (actions >= nvec).any()):
        raise ExportError(f"{name}: 'actions' holds values outside 0..nvec-1 (nvec {nvec.tolist()})")
    elif not spec.nvec and spec.discrete and (actions.min() < 0 or actions.max() >= spec.n_actions):
        raise ExportError(f"{name}: 'actions' holds indices outside 0..{spec.n_actions - 1}")
    if not spec.discrete and not np.isfinite(actions).all():
        raise ExportError(f"{name}: 'actions' holds non-finite values")
    if export.distribution is not None:
        export.distribution.check({k[len(GOLDEN_PREFIX):]: v for k, v in arrays.items() if k.startswith(GOLDEN_PREFIX)},
                                  n, name)
    if export.state_size:
        starts = arrays["episode_starts"].reshape(export.golden_steps, export.golden_lanes)
        if not np.isin(starts, (0.0, 1.0)).all() or not (starts[0] == 1.0).all():
            raise ExportError(f"{name}: 'episode_starts' must be 0 or 1 and 1 at every lane's first step")
        for key in ("h", "c"):
            if not np.isfinite(arrays[key]).all():
                raise ExportError(f"{name}: '{key}' holds non-finite values")
    arrays["obs"] = np.ascontiguousarray(obs, spec.input_dtype)
    return {k: np.ascontiguousarray(v) for k, v in arrays.items()}
