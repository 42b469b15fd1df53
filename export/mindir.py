"""MindIR writer: the policy cell as one graph, with a dynamic or fixed batch dimension."""
from __future__ import annotations

import os

import mindspore as ms
from mindspore import Tensor


def write_mindir(cell, obs_dim: int, batch, out_path: str, dtype: str = "float32") -> str:
    """Export ``cell`` to ``out_path`` (must end in .mindir). ``batch`` is an int or 'dynamic';
    ``dtype`` the input's (uint8: raw image frames)."""
    assert out_path.endswith(".mindir")
    shape = [None if batch == "dynamic" else int(batch), obs_dim]
    ms.export(cell, Tensor(shape=shape, dtype=getattr(ms, dtype)), file_name=out_path[: -len(".mindir")], file_format="MINDIR")
    if not os.path.isfile(out_path):  # pragma: no cover - MindSpore writes the file or raises
        raise RuntimeError(f"mindspore.export did not write {out_path}")
    # mindspore.export leaves the file owner-read-only (0400); give it the mode of every other
    # file of the export (0666 less the umask), so a copy read by another user works.
    os.chmod(out_path, 0o666 & ~_umask())
    return out_path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
