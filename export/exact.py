"""A float64 reference for a continuous or recurrent export's golden set: is an error rounding?

Two correct float32 runtimes (the training cell, ONNX Runtime) do not agree bit for bit: their
dot products sum in different orders, and a recurrent policy carries each step's rounding into its
state, so they can drift apart by more than a tolerance over a 500-step sequence. To tell that from
a deployment fault, the exported ONNX graph is made float64 (every float tensor, value type, Cast
target and constant) and run on the golden observations by ONNX's reference evaluator (NumPy; code
neither runtime shares), a recurrent state fed back at every step. Both float32 runs are then
measured against it: when the backend is within twice the distance from float64 of the farther of
two independent float32 evaluations, the training cell and the same reference evaluator on the
float32 graph (NumPy's summation order), their difference is float32 rounding, not a fault of the
deployed graph or loop (correct float32 evaluations differ in which of them rounds closer, and a
large network's dot products alone can put a correct runtime several times farther from float64
than the training cell happens to be). The reference replays the golden observations: a recurrent one
measures the state along the training cell's trajectory.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple

import numpy as np

FLOAT, DOUBLE = 1, 11  # onnx.TensorProto.FLOAT / DOUBLE
INPUTS = ("obs", "h", "c", "episode_start")


def to_float64(model):
    """A copy of the ONNX model with every float32 tensor, value type, Cast target and constant in float64."""
    import onnx
    from onnx import numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for init in g.initializer:
        if init.data_type == FLOAT:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float64), init.name))
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == FLOAT:
            vi.type.tensor_type.elem_type = DOUBLE
    for node in g.node:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == FLOAT:
                attr.i = DOUBLE
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == FLOAT:
                attr.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attr.t).astype(np.float64), attr.t.name))
    return m


def carried_states(step, obs: np.ndarray, starts: np.ndarray, hidden: int, dtype) -> Tuple[np.ndarray, np.ndarray]:
    """h, c after every step of sequences ``obs`` (steps, lanes, ...) from the zero state, the state
    fed back: ``step(obs_t, h, c, episode_start_t) -> (h_next, c_next)``."""
    lanes = starts.shape[1]
    h = np.zeros((lanes, hidden), dtype)
    c = np.zeros((lanes, hidden), dtype)
    hs, cs = [], []
    for t in range(len(obs)):
        h, c = step(obs[t], h, c, starts[t].astype(dtype))
        hs.append(h)
        cs.append(c)
    return np.stack(hs), np.stack(cs)


def reference_states(onnx_model: Any, obs: np.ndarray, starts: np.ndarray, hidden: int,
                     dtype=np.float64) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """``onnx_model`` (a path, or the loaded ModelProto) run by ONNX's reference evaluator over the
    sequences (h, c per step), in float64 (the float64 twin) or float32 (the graph as exported), or
    None when the graph does not have the single-observation recurrent inputs (obs, h, c, episode_start)."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    model = onnx.load(onnx_model) if isinstance(onnx_model, str) else onnx_model
    if tuple(i.name for i in model.graph.input) != INPUTS:
        return None
    ref = ReferenceEvaluator(to_float64(model) if dtype == np.float64 else model)

    def step(x, h, c, s):
        x = x.astype(dtype) if x.dtype.kind == "f" else x
        with np.errstate(over="ignore", invalid="ignore"):  # the reference Sigmoid computes both branches
            _, h2, c2 = ref.run(None, {"obs": x, "h": h, "c": c, "episode_start": s})[:3]  # (a distribution export: more)
        return np.asarray(h2, dtype), np.asarray(c2, dtype)

    return carried_states(step, obs, starts, hidden, dtype)


def _errors(h, c, exact) -> Dict[str, float]:
    return {"max_h_error": float(np.abs(np.asarray(h, np.float64) - exact[0]).max()),
            "max_c_error": float(np.abs(np.asarray(c, np.float64) - exact[1]).max())}


def _verdict(train: Dict[str, float], ref32: Dict[str, float], backend: Dict[str, float]) -> dict:
    """'rounding' when the backend is within twice the farther float32 evaluation's distance from
    float64 (the training cell's or the float32 reference evaluator's)."""
    worst32 = max(max(train.values()), max(ref32.values()))
    return {"training_cell": train, "float32_reference": ref32, "backend": backend,
            "rounding": bool(max(backend.values()) <= 2.0 * worst32)}


def _onnx_path(export_dir: str) -> Optional[str]:
    path = os.path.join(export_dir, "actor.onnx")
    return path if os.path.exists(path) else None


NO_ONNX = {"skipped": "the export has no actor.onnx (export with --format ...,onnx to get the float64 reference)"}


def float64_reference(export_dir: str, golden: Dict[str, np.ndarray], backend_states: Tuple[np.ndarray, np.ndarray],
                      hidden: int) -> dict:
    """The training cell's (golden) and the backend's recurrent states against the float64 twin's."""
    onnx_path = _onnx_path(export_dir)
    if onnx_path is None:
        return NO_ONNX
    import onnx

    model = onnx.load(onnx_path)  # once for both evaluations
    exact = reference_states(model, golden["obs"], golden["episode_starts"], hidden)
    if exact is None:
        return {"skipped": f"the ONNX graph's inputs are not {', '.join(INPUTS)}"}
    ref32 = reference_states(model, golden["obs"], golden["episode_starts"], hidden, np.float32)
    return _verdict(_errors(golden["h"], golden["c"], exact), _errors(*ref32, exact),
                    _errors(backend_states[0], backend_states[1], exact))


def float64_action_reference(export_dir: str, obs: np.ndarray, train_actions: np.ndarray,
                             backend_actions: np.ndarray) -> dict:
    """The training cell's and the backend's continuous actions on the golden observations against
    the float64 twin's (a graph of one input; its first output is the action)."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    onnx_path = _onnx_path(export_dir)
    if onnx_path is None:
        return NO_ONNX
    model = onnx.load(onnx_path)
    if len(model.graph.input) != 1:
        return {"skipped": f"the ONNX graph has {len(model.graph.input)} inputs (one observation input is covered)"}
    name = model.graph.input[0].name

    def run(m, dtype):
        x = obs.astype(dtype) if obs.dtype.kind == "f" else obs
        with np.errstate(over="ignore", invalid="ignore"):  # the reference Sigmoid computes both branches
            return np.asarray(ReferenceEvaluator(m).run(None, {name: x})[0], np.float64)

    exact = run(to_float64(model), np.float64)

    def error(actions) -> Dict[str, float]:
        return {"max_abs_error": float(np.abs(np.asarray(actions, np.float64).reshape(exact.shape) - exact).max())}

    return _verdict(error(train_actions), error(run(model, np.float32)), error(backend_actions))


def _figures(errors: Dict[str, float]) -> str:
    names = {"max_h_error": "h", "max_c_error": "c", "max_abs_error": "action"}
    return " ".join(f"{names[k]} {v:.3g}" for k, v in errors.items())


def describe(ref: dict) -> str:
    """One line for the report."""
    if "skipped" in ref:
        return f"float64 reference skipped: {ref['skipped']}"
    t, r, b = ref["training_cell"], ref["float32_reference"], ref["backend"]
    what = "a state error between them is float32 rounding carried through the state" if "max_h_error" in t \
        else "an action error between them is float32 rounding"
    line = (f"float64 reference (the ONNX graph in float64): training cell {_figures(t)}, ONNX's float32 reference "
            f"evaluator {_figures(r)}, backend {_figures(b)} from it")
    if ref["rounding"]:
        line += f"; the backend is as close to float64 arithmetic as two independent float32 evaluations: {what}"
    else:
        line += ("; the backend is more than twice as far from float64 arithmetic as the farther float32 evaluation: "
                 "not float32 rounding alone")
    return line
