"""ONNX writer (``mindspore.onnx.export``) at a fixed batch shape.

MindSpore writes an ``ops.argmax`` output as an int32 Cast behind an int64-declared graph
output, which ONNX Runtime refuses to load; the policy cell's ArgmaxHead therefore emits
int32 itself (networks.ArgmaxHead), and this writer checks the written graph's output type.
"""
from __future__ import annotations

import os

import numpy as np

from msrl_consistent.optional import ONNX_INSTALL, require

INPUT_NAME = "obs"
OUTPUT_NAME = "action"


def require_onnx():
    """The onnx package, or MissingOptionalPackage (exit 2) saying how to install it."""
    return require("onnx", "--format onnx", ONNX_INSTALL)


def write_onnx(cell, obs_dim: int, batch: int, out_path: str) -> dict:
    import mindspore as ms
    from mindspore import Tensor

    try:
        import mindspore.onnx as ms_onnx
        export = ms_onnx.export
    except (ImportError, AttributeError):  # pragma: no cover - older MindSpore
        export = None
    dummy = Tensor(np.zeros((int(batch), obs_dim), np.float32))
    # output_names is not passed: MindSpore 2.10 renames the graph output but not the node
    # producing it when the last op is a Cast (ONNX Runtime then rejects the model); the
    # output is renamed below with the onnx package instead.
    if export is not None:
        export(cell, dummy, file_name=out_path, input_names=[INPUT_NAME])
    else:  # pragma: no cover
        ms.export(cell, dummy, file_name=out_path[:-5], file_format="ONNX")
    if not os.path.isfile(out_path):  # pragma: no cover
        raise RuntimeError(f"ONNX export did not write {out_path}")
    info = {"batch": int(batch), "input": INPUT_NAME}
    onnx = require_onnx()
    model = onnx.load(out_path)
    old = model.graph.output[0].name
    if old != OUTPUT_NAME:
        for node in model.graph.node:
            for i, name in enumerate(node.output):
                if name == old:
                    node.output[i] = OUTPUT_NAME
            for i, name in enumerate(node.input):
                if name == old:
                    node.input[i] = OUTPUT_NAME
        model.graph.output[0].name = OUTPUT_NAME
        onnx.checker.check_model(model)
        onnx.save(model, out_path)
    info["opset"] = int(model.opset_import[0].version)
    info["input"] = model.graph.input[0].name
    info["output"] = model.graph.output[0].name
    info["output_elem_type"] = onnx.TensorProto.DataType.Name(model.graph.output[0].type.tensor_type.elem_type)
    return info
