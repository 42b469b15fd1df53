"""ATC's ``--keep_dtype`` list of an om export converted with a float16 precision mode: the nodes of
actor.onnx that compute the parts a float16 deployment keeps in float32 (sweep.FP32_KEPT: the
observation normalization, and the action head), so ATC's ``force_fp16`` or
``allow_fp32_to_fp16`` does not round them (CANN's ATC reference: ``--keep_dtype`` takes a file of
node names of the original model, one per line; it has no effect under ``must_keep_origin_dtype``,
which keeps every node's dtype anyway).

The nodes are found from the graph's structure, not from names (MindSpore's ONNX writer names
only some nodes after their cell): from the observation input(s) forward up to the first layer with
weights (normalization, a Discrete or Dict observation's encoding, an image's preprocessing), and
from the ``action`` output backward down to the last one (argmax, clipping, the tanh map to the
Box). A recurrent graph's state path is neither.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Set

from msrl_consistent.deploy.graph_io import IMAGE_PREFIX, OBS_INPUT

WEIGHT_OPS = frozenset({"Gemm", "MatMul", "Conv", "ConvTranspose", "BatchMatMul"})
FP16_MODES = ("force_fp16", "allow_fp32_to_fp16", "allow_mix_precision")
"""ATC precision modes that turn float32 nodes into float16 (those --keep_dtype applies to)."""
KEEP_FILE = "atc_keep_dtype.cfg"
ACTION_OUTPUT = "action"


def kept_nodes(model) -> List[str]:
    """The names of the nodes of ``model`` (an onnx ModelProto) that an fp16 conversion keeps in
    float32, in graph order (Constant nodes left out: they hold no arithmetic)."""
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    consumers: Dict[str, list] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    kept: Set[str] = set()
    stack = [i.name for i in graph.input if i.name == OBS_INPUT or i.name.startswith(IMAGE_PREFIX)]
    while stack:  # forward from the observations, up to the first weights
        for node in consumers[stack.pop()]:
            if node.op_type not in WEIGHT_OPS and node.name not in kept:
                kept.add(node.name)
                stack.extend(node.output)
    stack = [ACTION_OUTPUT]
    seen: Set[str] = set()
    while stack:  # backward from the action, down to the last weights
        node = producer.get(stack.pop())
        if node is None or node.op_type in WEIGHT_OPS or node.name in seen:
            continue
        seen.add(node.name)
        stack.extend(node.input)
    kept |= seen
    names = [n.name for n in graph.node if n.name in kept and n.op_type != "Constant"]
    if any(not n for n in names):
        raise ValueError("actor.onnx has an unnamed node among those --keep_dtype must name")
    return names


def write_keep_dtype(onnx_path: str, out_path: str) -> int:
    """Write ATC's --keep_dtype file for the graph ``onnx_path``; -> the number of nodes listed."""
    import onnx

    names = kept_nodes(onnx.load(onnx_path))
    with open(out_path, "w", encoding="utf-8") as fh:
        fh.write("".join(f"{n}\n" for n in names))
    return len(names)
