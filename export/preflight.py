"""ATC pre-flight: what CANN's ATC would refuse in actor.onnx, found before ``atc`` runs (and on a
machine without CANN): the opset, every operator and the dtypes of its inputs, checked against
CANN's published list of ONNX operators for Atlas inference products (Ascend 310P), transcribed
in ``cann_onnx_ops`` (its docstring gives the CANN version, the pages and what it omits).

The precision mode decides what a float32 input of an operator that CANN lists for float16 only
(MatMul, for one) means: ``must_keep_origin_dtype`` keeps float32 and ATC refuses the model (its
own description of the mode says so), every other mode lets ATC compute that operator in float16,
which is reported (``float16_on_device``) rather than refused: a precision change the precision
sweep measures, not a conversion failure. Attribute constraints stay notes: the table gives them
in words only.
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Optional

from msrl_consistent.deploy import ExportError

from . import cann_onnx_ops as cann
from .onnx import tensor_dtypes

KEEPS_FLOAT32 = ("must_keep_origin_dtype",)
"""ATC precision modes that never compute a float32 operator in float16."""
DOC_OMISSIONS = {("Reshape", 0, "float32"): "CANN 6.0.1's Reshape page lists float32; the 8.5.0 and 9.0.0 pages omit it "
                                            "(a copy operator: no arithmetic to change); accepted"}
"""Dtypes a page of the table omits where an earlier edition listed them: accepted, with the reason
in the report's notes rather than a refusal or a float16 claim the table alone cannot support."""


class PreflightError(ExportError):
    """ATC would refuse actor.onnx (exit 2, naming the operator)."""


def preflight(onnx_path: str, precision_mode: str) -> dict:
    """Check ``onnx_path`` against CANN's table under ATC's ``precision_mode``; returns the report
    (``passed``, ``refused``: one line per refusal, ``float16_on_device``, ``unchecked``, ``notes``)."""
    import onnx
    model = onnx.load(onnx_path)
    name = os.path.basename(onnx_path)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    refused, fp16, unchecked, notes = [], [], set(), {}
    lo, hi = cann.OPSET_RANGE
    if opset is None or not lo <= opset <= hi:
        refused.append(f"{name}: opset {opset}, CANN {cann.CANN_VERSION}'s ATC takes opsets {lo}-{hi}")
    types = tensor_dtypes(model)
    for node in model.graph.node:
        what = f"operator {node.op_type} (node {node.name or node.output[0]})"
        entry = cann.OPERATORS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if entry is None:
            refused.append(f"{what} is not in CANN {cann.CANN_VERSION}'s list of ONNX operators for Atlas inference "
                           f"products")
            continue
        if "note" in entry:
            notes[node.op_type] = entry["note"]
        ops = entry.get("opsets")
        if ops and opset is not None and not ops[0] <= opset <= ops[1]:
            refused.append(f"{what}: CANN lists it for opsets {ops[0]}-{ops[1]}, the graph is opset {opset}")
        table = entry["dtypes"]
        if table.get("*", ()) is None and len(table) == 1:
            unchecked.add(node.op_type)
            continue
        for i, tensor in enumerate(node.input):
            allowed, dtype = table.get(i, table.get("*")), types.get(tensor)
            if not tensor or allowed is None or dtype is None or dtype in allowed:
                continue
            if (node.op_type, i, dtype) in DOC_OMISSIONS:
                notes[f"{node.op_type} input {i} {dtype}"] = DOC_OMISSIONS[(node.op_type, i, dtype)]
                continue
            if dtype == "float32" and "float16" in allowed and precision_mode not in KEEPS_FLOAT32:
                fp16.append(f"{node.op_type} input {i} ({node.name or node.output[0]})")
                continue
            why = (f"; --precision-mode {precision_mode} keeps float32, so ATC refuses it (a mode such as force_fp32 "
                   f"lets ATC compute it in float16: measure that with --precision-sweep)"
                   if dtype == "float32" and "float16" in allowed else "")
            refused.append(f"{what}: input {i} is {dtype}, CANN lists {', '.join(allowed)}{why}")
    return {"passed": not refused, "cann_version": cann.CANN_VERSION, "source": cann.SOURCE, "read_on": cann.READ_ON,
            "precision_mode": precision_mode, "opset": opset,
            "operators": dict(sorted(Counter(n.op_type for n in model.graph.node).items())),
            "refused": refused, "float16_on_device": fp16, "unchecked": sorted(unchecked), "notes": notes}


def require_pass(report: dict, onnx_name: str = "actor.onnx") -> None:
    if not report["passed"]:
        first = report["refused"][0]
        more = f" (and {len(report['refused']) - 1} more)" if len(report["refused"]) > 1 else ""
        raise PreflightError(f"ATC pre-flight (CANN {report['cann_version']} ONNX operator list for Atlas inference "
                             f"products): {first}{more}")


def summary(report: dict) -> Optional[str]:
    """One line for the export's output: what runs in float16 on the device and what was not checked."""
    parts = []
    if report["float16_on_device"]:
        parts.append(f"ATC computes {len(report['float16_on_device'])} operator input(s) in float16 under "
                     f"{report['precision_mode']} ({', '.join(sorted({f.split()[0] for f in report['float16_on_device']}))})")
    if report["unchecked"]:
        parts.append(f"dtypes not in the transcribed table for {', '.join(report['unchecked'])}")
    return "; ".join(parts) or None
