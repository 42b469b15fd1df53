"""MindIR writer: the policy cell as one graph, with a dynamic or fixed batch dimension."""
from __future__ import annotations

import os

import mindspore as ms
from mindspore import Tensor


def write_mindir(cell, obs_dim: int, batch, out_path: str, dtype: str = "float32", state_size: int = 0) -> str:
    """Export ``cell`` to ``out_path`` (must end in .mindir). ``batch`` is an int or 'dynamic';
    ``dtype`` the input's (uint8: raw image frames); ``state_size`` > 0: a recurrent cell, whose
    inputs h, c (B, state_size) and episode_start (B,) follow the observation."""
    assert out_path.endswith(".mindir")
    b = None if batch == "dynamic" else int(batch)
    inputs = [Tensor(shape=[b, obs_dim], dtype=getattr(ms, dtype))]
    if state_size:
        inputs += [Tensor(shape=[b, state_size], dtype=ms.float32), Tensor(shape=[b, state_size], dtype=ms.float32),
                   Tensor(shape=[b], dtype=ms.float32)]
    ms.export(cell, *inputs, file_name=out_path[: -len(".mindir")], file_format="MINDIR")
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
