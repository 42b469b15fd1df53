"""ONNX writer (``mindspore.onnx.export``): a symbolic batch dimension, or a fixed one for ATC.

MindSpore's ONNX exporter writes fixed shapes. For a dynamic export the graph's input and
output batch dimension is made symbolic (``dim_param "batch"``) with the onnx package, the
intermediate shape annotations are dropped (ONNX Runtime infers them), and the result is
checked with ``onnx.checker`` and run by ONNX Runtime at batch 1, 7 and 256 against the
policy cell (discrete actions identical, continuous within 1e-5): the policy cells are Gemm /
elementwise / ArgMax graphs without a Reshape, so nothing inside hardcodes the batch. If that
check ever fails, the fixed-batch graph is kept and the reason recorded in the manifest.

MindSpore writes an ``ops.argmax`` output as an int32 Cast behind an int64-declared graph
output, which ONNX Runtime refuses to load; the policy cell's ArgmaxHead therefore emits
int32 itself (networks.heads.ArgmaxHead), and this writer checks the written graph's output type.
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


DYNAMIC_CHECK_BATCHES = (1, 7, 256)
BATCH_DIM = "batch"


def write_onnx(cell, obs_dim: int, batch: int, out_path: str, dynamic: bool = False, dtype: str = "float32") -> dict:
    import mindspore as ms
    from mindspore import Tensor

    try:
        import mindspore.onnx as ms_onnx
        export = ms_onnx.export
    except (ImportError, AttributeError):  # pragma: no cover - older MindSpore
        export = None
    dummy = Tensor(np.zeros((int(batch), obs_dim), dtype))
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
    if dynamic:
        reason = _make_batch_dynamic(onnx, model, cell, obs_dim, out_path, dtype)
        if reason is None:
            info["batch"] = "dynamic"
            model = onnx.load(out_path)
        else:
            info["dynamic_batch_failed"] = reason
    info["opset"] = int(model.opset_import[0].version)
    info["input"] = model.graph.input[0].name
    info["output"] = model.graph.output[0].name
    info["output_elem_type"] = onnx.TensorProto.DataType.Name(model.graph.output[0].type.tensor_type.elem_type)
    return info


def _make_batch_dynamic(onnx, model, cell, obs_dim: int, out_path: str, dtype: str = "float32"):
    """Symbolic batch dimension on the graph's input and output; written to ``out_path`` only
    when onnx.checker and ONNX Runtime at DYNAMIC_CHECK_BATCHES agree with ``cell``. Returns
    None on success, else the reason the fixed-batch graph was kept."""
    from mindspore import Tensor

    dyn = onnx.ModelProto()
    dyn.CopyFrom(model)
    for value in list(dyn.graph.input) + list(dyn.graph.output):
        dims = value.type.tensor_type.shape.dim
        if len(dims):
            dims[0].ClearField("dim_value")
            dims[0].dim_param = BATCH_DIM
    del dyn.graph.value_info[:]
    try:
        onnx.checker.check_model(dyn)
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(dyn.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        for b in DYNAMIC_CHECK_BATCHES:
            x = (rng.integers(0, 256, (b, obs_dim)).astype(np.uint8) if dtype == "uint8"
                 else rng.normal(0.0, 1.0, (b, obs_dim)).astype(np.float32))
            got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
            want = cell(Tensor(x)).asnumpy()
            if got.shape != want.shape or got.dtype != want.dtype:
                return f"batch {b}: ONNX Runtime returned {got.dtype} {list(got.shape)}, the cell {want.dtype} {list(want.shape)}"
            if want.dtype.kind in "iu":
                if not np.array_equal(got, want):
                    return f"batch {b}: discrete actions differ from the cell's"
            elif float(np.abs(got.astype(np.float64) - want).max()) > 1e-5:
                return f"batch {b}: max abs error {float(np.abs(got - want).max()):.3g} > 1e-5"
    except Exception as exc:  # keep the fixed graph, say why
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    onnx.save(dyn, out_path)
    return None
