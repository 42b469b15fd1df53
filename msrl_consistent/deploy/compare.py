"""The comparison of a backend's actions with the training cell's recorded ones."""
from __future__ import annotations

from typing import Any, Dict

import numpy as np


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
