"""MindIR writer: the policy cell as one graph, with a dynamic or fixed batch dimension."""
from __future__ import annotations

import os

import mindspore as ms
from mindspore import Tensor


def write_mindir(cell, inputs, batch, out_path: str) -> str:
    """Export ``cell`` to ``out_path`` (must end in .mindir). ``inputs``: the graph's inputs in
    order, (name, shape without the batch axis, dtype) each (deploy.graph_io.graph_inputs: the
    observation input(s), then a recurrent cell's h, c and episode_start); ``batch`` an int or
    'dynamic'."""
    assert out_path.endswith(".mindir")
    b = None if batch == "dynamic" else int(batch)
    args = [Tensor(shape=[b, *shape], dtype=getattr(ms, dtype)) for _, shape, dtype in inputs]
    ms.export(cell, *args, file_name=out_path[: -len(".mindir")], file_format="MINDIR")
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
