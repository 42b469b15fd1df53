"""`msrl export --format lite`: actor.onnx through MindSpore Lite's own converter into
actor_lite.mindir, the model file Lite runs.

Lite 2.0.0 (PyPI's only Lite) reads MindIR up to version 1 and MindSpore 2.10 writes version 3,
so Lite does not load actor.mindir; its converter reads ONNX. Two things are never left
implicit: the weights stay float32 (the converter's weight_fp16 is off) and, for ``--lite-target
ascend``, the converter's ``[ascend_context] precision_mode`` (Lite's Ascend default is
enforce_fp16) is written with an explicit mode, enforce_fp32 unless asked otherwise, and the
conversion is Lite's ascend_oriented one: it compiles the graph with CANN (so CANN must be
installed where the export runs) and fixes the precision in the model; Lite's general
optimization would parse [ascend_context] and drop it. The
conversion runs in a process of its own (deploy.lite_process): this process holds MindSpore.

The converted graph is the exported ONNX graph with two rewrites Lite 2.0.0 needs, measured, each
giving the same values element for element: its shape inference rejects ``Pow`` whose base is a
constant (the recurrent cells' correctly rounded sigmoid ``1 / (1 + 2^(-x log2 e))``) and runs it
when the base is computed in the graph, so such a base becomes ``Expand(base, Shape(exponent))``;
its CPU target has no uint8 Reshape kernel (a multi-input graph reshapes the camera's raw frames,
then casts them), so that Cast moves before the Reshape. actor.onnx itself is not changed.
"""
from __future__ import annotations

import os
import tempfile
from typing import List, Optional

from msrl_consistent.config import ConfigError
from msrl_consistent.deploy import (
    FORMAT_FILE,
    LITE_ASCEND_PRECISION_MODES,
    LITE_CPU_PRECISION_MODES,
    BackendUnavailable,
    ExportError,
)
from msrl_consistent.deploy.lite import INSTALL_HINT, available

LITE_FILE = FORMAT_FILE["lite"]
TARGETS = ("cpu", "ascend")
DEFAULT_PRECISION_MODE = "enforce_fp32"


class LiteConversionError(ExportError):
    """Lite's converter refused the model (exit 2, with its reason)."""


def check_options(target: str, precision_mode: Optional[str]) -> str:
    """The precision mode the export records (explicit, never Lite's default)."""
    if target not in TARGETS:
        raise ConfigError(f"--lite-target {target!r}: expected one of {', '.join(TARGETS)}")
    mode = precision_mode or DEFAULT_PRECISION_MODE
    modes = LITE_ASCEND_PRECISION_MODES if target == "ascend" else LITE_CPU_PRECISION_MODES
    if mode not in modes:
        raise ConfigError(f"--lite-precision-mode {mode!r} for target {target}: expected one of {', '.join(modes)}")
    if not available():  # before any work
        raise BackendUnavailable(f"--format lite needs MindSpore Lite's converter: {INSTALL_HINT}")
    return mode


def computed_pow_bases(model) -> List[str]:
    """Rewrite every Pow whose base is an initializer or a Constant into a base computed in the
    graph (Expand(base, Shape(exponent))); returns the rewritten nodes' names."""
    from onnx import helper
    graph = model.graph
    constant = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    nodes, rewritten = [], []
    for node in graph.node:
        if node.op_type == "Pow" and node.input[0] in constant:
            base, exponent = node.input[0], node.input[1]
            shape, expanded = f"{node.name}/lite_shape", f"{node.name}/lite_base"
            nodes.append(helper.make_node("Shape", [exponent], [shape], name=shape))
            nodes.append(helper.make_node("Expand", [base, shape], [expanded], name=expanded))
            node.input[0] = expanded
            rewritten.append(node.name)
        nodes.append(node)
    _set_nodes(graph, nodes)
    return rewritten


def _set_nodes(graph, nodes) -> None:
    """The graph's node list replaced by ``nodes`` (its own nodes among them, rewritten in place)."""
    del graph.node[:]
    graph.node.extend(nodes)


def cast_before_uint8_reshape(model) -> List[str]:
    """Rewrite Reshape(uint8) -> Cast into Cast -> Reshape (the camera inputs of a multi-input graph):
    Lite 2.0.0's CPU target has no uint8 Reshape kernel, and an element-wise cast commutes with a
    reshape exactly. Returns the rewritten Reshape nodes' names."""
    from onnx import helper

    from .onnx import tensor_dtypes
    graph = model.graph
    types = tensor_dtypes(model)
    consumers: dict = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    moves = {}  # id(Reshape) -> its one consumer, a Cast
    for node in graph.node:
        if node.op_type != "Reshape":
            continue
        users = consumers.get(node.output[0], [])
        if types.get(node.input[0]) == "uint8" and len(users) == 1 and users[0].op_type == "Cast":
            moves[id(node)] = users[0]
    nodes, dropped = [], {id(c) for c in moves.values()}
    for node in graph.node:
        if id(node) in dropped:
            continue
        cast = moves.get(id(node))
        if cast is not None:
            casted = f"{node.name}/lite_cast"
            to = next(helper.get_attribute_value(a) for a in cast.attribute if a.name == "to")
            nodes.append(helper.make_node("Cast", [node.input[0]], [casted], name=casted, to=to))
            node.input[0], node.output[0] = casted, cast.output[0]
        nodes.append(node)
    rewritten = [n.name for n in graph.node if id(n) in moves]
    _set_nodes(graph, nodes)
    return rewritten


def converter_config(target: str, mode: str) -> str:
    """The converter's config file text: for Ascend, ``[ascend_context]`` with the explicit mode."""
    return f"[ascend_context]\nprecision_mode={mode}\n" if target == "ascend" else ""


def write_lite(onnx_path: str, out_path: str, target: str = "cpu", precision_mode: Optional[str] = None) -> dict:
    """Convert ``onnx_path`` into ``out_path`` (a Lite MindIR); returns what the manifest records:
    the converter's version, every option, the graph rewrites and the time taken."""
    import time

    import onnx

    from msrl_consistent.deploy.lite_process import LiteProcess
    assert out_path.endswith(".mindir")
    mode = check_options(target, precision_mode)
    model = onnx.load(onnx_path)
    rewrites = {"pow_constant_base_computed": computed_pow_bases(model),
                "cast_before_uint8_reshape": cast_before_uint8_reshape(model)}
    config = converter_config(target, mode)
    with tempfile.TemporaryDirectory(prefix="msrl-lite-") as tmp:
        src = os.path.join(tmp, "actor.onnx")
        onnx.save(model, src)
        cfg = ""
        if config:
            cfg = os.path.join(tmp, "converter.cfg")
            with open(cfg, "w", encoding="utf-8") as fh:
                fh.write(config)
        proc = LiteProcess()
        try:
            t0 = time.perf_counter()
            try:
                written = proc.convert(src, os.path.join(tmp, "actor_lite"), cfg, target)
            except RuntimeError as exc:
                needs = (" (target ascend is Lite's ascend_oriented conversion: it compiles the graph with CANN, which "
                         "must be installed where msrl export runs; source CANN's set_env.sh)" if target == "ascend" else "")
                raise LiteConversionError(f"{os.path.basename(onnx_path)}: MindSpore Lite's converter refused it "
                                          f"({exc}){needs}") from None
            seconds = time.perf_counter() - t0
            version = proc.call("version")[0]["version"]
        finally:
            proc.close()
        os.replace(written, out_path)
    return {"tool": "mindspore_lite converter", "lite_version": version, "from": os.path.basename(onnx_path),
            "fmk": "ONNX", "save_type": "MINDIR", "weight_fp16": False, "target": target,
            "optimize": "ascend_oriented" if target == "ascend" else "general", "precision_mode": mode,
            "config": config, "onnx_rewrites": rewrites,
            "seconds": round(seconds, 3)}
