"""A float64 reference for a recurrent export's golden sequences: is a state error rounding?

A recurrent policy carries its state through every step, so float32 rounding accumulates in it,
and two correct float32 runtimes (the training cell, ONNX Runtime) can drift apart by more than a
tolerance over a 500-step sequence. To tell that from a deployment fault, the exported ONNX graph is
made float64 (every float tensor, value type, Cast target and constant) and run on the golden
observations by ONNX's reference evaluator (NumPy; code neither runtime shares), the state fed back
at every step. Both float32 runs are then measured against it: when the backend is as close to the
float64 states as the training cell is (within twice its distance: two correct float32 evaluations
differ in which of them rounds closer), their difference is float32 rounding carried through the
state, not a fault of the deployed graph or loop. The reference replays the golden observations:
it measures the state along the training cell's trajectory.
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Tuple

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


def float64_states(onnx_path: str, obs: np.ndarray, starts: np.ndarray, hidden: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """The float64 twin of ``onnx_path`` over the sequences (h, c per step), or None when the graph
    does not have the single-observation recurrent inputs (obs, h, c, episode_start)."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    model = onnx.load(onnx_path)
    if tuple(i.name for i in model.graph.input) != INPUTS:
        return None
    ref = ReferenceEvaluator(to_float64(model))

    def step(x, h, c, s):
        x = x.astype(np.float64) if x.dtype == np.float32 else x
        _, h2, c2 = ref.run(None, {"obs": x, "h": h, "c": c, "episode_start": s})[:3]  # (a distribution export: more)
        return np.asarray(h2, np.float64), np.asarray(c2, np.float64)

    return carried_states(step, obs, starts, hidden, np.float64)


def _errors(h, c, exact) -> Dict[str, float]:
    return {"max_h_error": float(np.abs(np.asarray(h, np.float64) - exact[0]).max()),
            "max_c_error": float(np.abs(np.asarray(c, np.float64) - exact[1]).max())}


def float64_reference(export_dir: str, golden: Dict[str, np.ndarray], backend_states: Tuple[np.ndarray, np.ndarray],
                      hidden: int) -> dict:
    """The training cell's (golden) and the backend's states against the float64 twin's, and the
    verdict: 'rounding' when the backend is within twice the training cell's distance from float64
    (as close to exact arithmetic as the training cell, up to which of the two rounds closer)."""
    onnx_path = os.path.join(export_dir, "actor.onnx")
    if not os.path.exists(onnx_path):
        return {"skipped": "the export has no actor.onnx (export with --format ...,onnx to get the float64 reference)"}
    exact = float64_states(onnx_path, golden["obs"], golden["episode_starts"], hidden)
    if exact is None:
        return {"skipped": f"the ONNX graph's inputs are not {', '.join(INPUTS)}"}
    train = _errors(golden["h"], golden["c"], exact)
    backend = _errors(backend_states[0], backend_states[1], exact)
    worst_train = max(train.values())
    worst_backend = max(backend.values())
    return {"training_cell": train, "backend": backend,
            "rounding": bool(worst_backend <= 2.0 * worst_train)}


def describe(ref: dict) -> str:
    """One line for the report."""
    if "skipped" in ref:
        return f"float64 reference skipped: {ref['skipped']}"
    t, b = ref["training_cell"], ref["backend"]
    line = (f"float64 reference (the ONNX graph in float64): training cell h {t['max_h_error']:.3g} c "
            f"{t['max_c_error']:.3g}, backend h {b['max_h_error']:.3g} c {b['max_c_error']:.3g} from it")
    if ref["rounding"]:
        line += ("; the backend is as close to float64 arithmetic as the training cell: a state error between "
                 "them is float32 rounding carried through the state")
    else:
        line += ("; the backend is more than twice as far from float64 arithmetic as the training cell: not float32 "
                 "rounding alone")
    return line
