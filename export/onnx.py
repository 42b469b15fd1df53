"""ONNX writer (``mindspore.onnx.export``): a symbolic batch dimension, or a fixed one for ATC.

MindSpore's ONNX exporter writes fixed shapes. For a dynamic export the graph's input and
output batch dimension is made symbolic (``dim_param "batch"``) with the onnx package, the
intermediate shape annotations are dropped (ONNX Runtime infers them), and the result is
checked with ``onnx.checker`` and run by ONNX Runtime at batch 1, 7 and 256 against the
policy cell (discrete actions identical, continuous within 1e-5): the policy cells are Gemm /
elementwise / ArgMax graphs. A recurrent cell's one Reshape (the ExpandDims of its (B,)
episode_start) is written with the batch as a constant, which becomes -1; a recurrent cell's
outputs are all compared (action, h_next, c_next). If that check ever fails, the fixed-batch
graph is kept and the reason recorded in the manifest.

MindSpore writes an ``ops.argmax`` output as an int32 Cast behind an int64-declared graph
output, which ONNX Runtime refuses to load; the policy cell's ArgmaxHead therefore emits
int32 itself (networks.heads.ArgmaxHead), and this writer checks the written graph's output type.
"""
from __future__ import annotations

import os
from typing import Dict

import numpy as np

from msrl_consistent.deploy.graph_io import OBS_INPUT, zero_inputs
from msrl_consistent.deploy.recurrent import STATE_OUTPUTS
from msrl_consistent.deploy.sampling import OUTPUTS
from msrl_consistent.optional import ONNX_INSTALL, require

INPUT_NAME = OBS_INPUT
OUTPUT_NAME = "action"


def require_onnx():
    """The onnx package, or MissingOptionalPackage (exit 2) saying how to install it."""
    return require("onnx", "--format onnx", ONNX_INSTALL)


DYNAMIC_CHECK_BATCHES = (1, 7, 256)
BATCH_DIM = "batch"


def dummy_inputs(inputs, batch: int, rng=None) -> list:
    """The graph's ``inputs`` (deploy.graph_io.graph_inputs) at ``batch`` rows: zeros, or with
    ``rng`` random uint8 frames, normal observation rows, h in [-1, 1], normal c and 0/1 episode
    starts."""
    if rng is None:
        return zero_inputs(batch, inputs)
    out = []
    for name, shape, dtype in inputs:
        size = (batch, *shape)
        if dtype == "uint8":
            out.append(rng.integers(0, 256, size).astype(np.uint8))
        elif name == "episode_start":
            out.append((rng.random(batch) < 0.5).astype(np.float32))
        elif name == "h":
            out.append(rng.uniform(-1, 1, size).astype(np.float32))
        else:
            out.append(rng.normal(0.0, 1.0, size).astype(np.float32))
    return out


def write_onnx(cell, inputs, batch: int, out_path: str, dynamic: bool = False) -> dict:
    """``cell`` as ONNX at ``batch`` rows, with a symbolic batch when ``dynamic`` (checked, see the
    module); ``inputs``: the graph's inputs in order (deploy.graph_io.graph_inputs)."""
    import mindspore as ms
    from mindspore import Tensor

    try:
        import mindspore.onnx as ms_onnx
        export = ms_onnx.export
    except (ImportError, AttributeError):  # pragma: no cover - older MindSpore
        export = None
    dummy = [Tensor(x) for x in dummy_inputs(inputs, int(batch))]
    input_names = [name for name, _, _ in inputs]
    recurrent = input_names[-1] == "episode_start"
    output_names = [OUTPUT_NAME] + (list(STATE_OUTPUTS) if recurrent else [])
    kind = getattr(cell, "kind", None)  # a distribution export's further outputs (deploy.sampling)
    output_names += list(OUTPUTS[kind]) if kind else []
    # output_names is not passed: MindSpore 2.10 renames the graph output but not the node
    # producing it when the last op is a Cast (ONNX Runtime then rejects the model); the
    # outputs are renamed below with the onnx package instead.
    if export is not None:
        export(cell, *dummy, file_name=out_path, input_names=input_names)
    else:  # pragma: no cover
        ms.export(cell, *dummy, file_name=out_path[:-5], file_format="ONNX")
    if not os.path.isfile(out_path):  # pragma: no cover
        raise RuntimeError(f"ONNX export did not write {out_path}")
    info = {"batch": int(batch), "input": input_names[0]}
    onnx = require_onnx()
    model = onnx.load(out_path)
    renames = {out.name: new for out, new in zip(model.graph.output, output_names) if out.name != new}
    if renames:
        for node in model.graph.node:
            node.output[:] = [renames.get(name, name) for name in node.output]
            node.input[:] = [renames.get(name, name) for name in node.input]
        for out in model.graph.output:
            out.name = renames.get(out.name, out.name)
        onnx.checker.check_model(model)
        onnx.save(model, out_path)
    if dynamic:
        reason = _make_batch_dynamic(onnx, model, cell, inputs, out_path, int(batch))
        if reason is None:
            info["batch"] = "dynamic"
            model = onnx.load(out_path)
        else:
            info["dynamic_batch_failed"] = reason
    info["opset"] = int(model.opset_import[0].version)
    info["input"] = model.graph.input[0].name
    info["output"] = model.graph.output[0].name
    if len(inputs) > 1 or kind:
        info["inputs"] = [i.name for i in model.graph.input]
        info["outputs"] = [o.name for o in model.graph.output]
    info["output_elem_type"] = onnx.TensorProto.DataType.Name(model.graph.output[0].type.tensor_type.elem_type)
    return info


def _batch_reshapes(onnx, graph, batch: int) -> int:
    """Reshape targets written as constants with the export's batch first (MindSpore writes an
    ExpandDims of a (B,) input that way) get -1 there; -> how many. The dynamic check below proves
    the result against the cell."""
    from onnx import numpy_helper

    consts = {n.output[0]: n for n in graph.node if n.op_type == "Constant"}
    inits = {i.name: i for i in graph.initializer}
    changed = 0
    for node in graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2:
            continue
        name = node.input[1]
        if name in inits:
            shape = numpy_helper.to_array(inits[name])
            if shape.ndim == 1 and shape.size > 1 and shape[0] == batch:
                inits[name].CopyFrom(numpy_helper.from_array(np.concatenate([[-1], shape[1:]]).astype(shape.dtype), name))
                changed += 1
        elif name in consts:
            attr = next((a for a in consts[name].attribute if a.name == "value"), None)
            shape = None if attr is None else numpy_helper.to_array(attr.t)
            if shape is not None and shape.ndim == 1 and shape.size > 1 and shape[0] == batch:
                attr.t.CopyFrom(numpy_helper.from_array(np.concatenate([[-1], shape[1:]]).astype(shape.dtype)))
                changed += 1
    return changed


def _make_batch_dynamic(onnx, model, cell, inputs, out_path: str, batch: int = 1):
    """Symbolic batch dimension on the graph's inputs and outputs; written to ``out_path`` only
    when onnx.checker and ONNX Runtime at DYNAMIC_CHECK_BATCHES agree with ``cell`` on every
    output. Returns None on success, else the reason the fixed-batch graph was kept."""
    from mindspore import Tensor

    dyn = onnx.ModelProto()
    dyn.CopyFrom(model)
    for value in list(dyn.graph.input) + list(dyn.graph.output):
        dims = value.type.tensor_type.shape.dim
        if len(dims):
            dims[0].ClearField("dim_value")
            dims[0].dim_param = BATCH_DIM
    del dyn.graph.value_info[:]
    if batch > 1 or len(inputs) > 1:
        _batch_reshapes(onnx, dyn.graph, batch)
    try:
        onnx.checker.check_model(dyn)
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(dyn.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        rng = np.random.default_rng(0)
        for b in DYNAMIC_CHECK_BATCHES:
            xs = dummy_inputs(inputs, b, rng)
            gots = sess.run(None, dict(zip(names, xs)))
            wants = cell(*(Tensor(x) for x in xs))
            wants = [w.asnumpy() for w in (wants if isinstance(wants, (tuple, list)) else [wants])]
            for k, (got, want) in enumerate(zip(gots, wants)):
                what = f"batch {b}, output {k}"
                if got.shape != want.shape or got.dtype != want.dtype:
                    return f"{what}: ONNX Runtime returned {got.dtype} {list(got.shape)}, the cell {want.dtype} {list(want.shape)}"
                if want.dtype.kind in "iu":
                    if not np.array_equal(got, want):
                        return f"{what}: discrete actions differ from the cell's"
                elif float(np.abs(got.astype(np.float64) - want).max()) > 1e-5:
                    return f"{what}: max abs error {float(np.abs(got - want).max()):.3g} > 1e-5"
    except Exception as exc:  # keep the fixed graph, say why
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    onnx.save(dyn, out_path)
    return None


def tensor_dtypes(model) -> Dict[str, str]:
    """Every tensor's element type by name (inputs, initializers, Constants, inferred values)."""
    import onnx
    from onnx import helper
    inferred = onnx.shape_inference.infer_shapes(model)
    out: Dict[str, str] = {}
    for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        if vi.type.tensor_type.elem_type:
            out[vi.name] = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name
    for init in model.graph.initializer:
        out[init.name] = helper.tensor_dtype_to_np_dtype(init.data_type).name
    for node in model.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    out[node.output[0]] = helper.tensor_dtype_to_np_dtype(a.t.data_type).name
    return out
