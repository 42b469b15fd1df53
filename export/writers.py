"""One :class:`FormatWriter` per export format (msrl_consistent.deploy.formats): what ``--format
NAME`` checks before any work (its options, its tools) and how it writes its file.

``msrl export`` plans the formats (:func:`plan`: the ones every export writes and the ones a
requested format is converted from added) and writes them in the registry's order
(:func:`write_formats`), so a converted format finds its source written.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Optional

from msrl_consistent.config import ConfigError
from msrl_consistent.deploy.formats import FORMATS, NAMES, get_format

from .keep_dtype import FP16_MODES, KEEP_FILE, write_keep_dtype
from .lite import check_options as check_lite_options
from .lite import write_lite
from .mindir import write_mindir
from .om import ATC_PRECISION_MODES, DEFAULT_PRECISION_MODE, find_atc, write_om
from .onnx import require_onnx, write_onnx
from .preflight import preflight, require_pass


@dataclass
class Options:
    """The converters' options from the command line (checked, then resolved, by the writers)."""

    soc_version: Optional[str] = None
    precision_mode: Optional[str] = None
    """ATC's precision mode (om)."""
    lite_target: str = "cpu"
    lite_precision_mode: Optional[str] = None
    preflight_only: bool = False
    """om: the ATC pre-flight in place of ATC (no actor.om; the pre-flight's report in the manifest)."""


@dataclass
class Graph:
    """What the writers write: the cell, its inputs in order, the batches, the directory."""

    cell: Any
    obs_inputs: list
    """The observation inputs (graph_io.obs_inputs of the SpaceSpec)."""
    inputs: list
    """The graph's inputs in order: the observation input(s), then a recurrent policy's state."""
    batch: Any
    """The export's batch: a fixed size or "dynamic"."""
    golden_batch: int
    dir: str

    def path(self, fmt: str) -> str:
        return os.path.join(self.dir, get_format(fmt).file)


@dataclass(frozen=True)
class FormatWriter:
    """How one format is checked and written."""

    name: str
    check: Callable[[Options, bool], None]
    """Before any work: ``check(options, requested)`` raises (exit 2) on a bad option or a missing
    tool; it sees every export, so an option that needs its format is refused without it."""
    write: Callable[[Graph, Options, Any], None]
    """``write(graph, options, export_info)``: the file into ``graph.dir``; what it records goes
    into the manifest's ``export_info`` (``conversion``, ``onnx``, ``formats``)."""


def _no_check(opts: Options, requested: bool) -> None:
    pass


def _check_onnx(opts: Options, requested: bool) -> None:
    if requested:
        require_onnx()  # fail before any work when the onnx package is missing


def _check_om(opts: Options, requested: bool) -> None:
    """ATC's precision mode (explicit); ATC present unless only the pre-flight runs."""
    if opts.preflight_only and not requested:
        raise ConfigError("--preflight-only checks what ATC would refuse: it needs --format om")
    opts.precision_mode = opts.precision_mode or DEFAULT_PRECISION_MODE
    if not requested:
        return
    if not opts.soc_version and not opts.preflight_only:
        raise ConfigError("--format om needs --soc-version (for example Ascend310P3)")
    if opts.precision_mode not in ATC_PRECISION_MODES:
        raise ConfigError(f"--precision-mode {opts.precision_mode!r}: expected one of {', '.join(ATC_PRECISION_MODES)}")
    if not opts.preflight_only:
        find_atc()  # fail before any work when CANN is missing


def _check_lite(opts: Options, requested: bool) -> None:
    if requested:
        opts.lite_precision_mode = check_lite_options(opts.lite_target, opts.lite_precision_mode)


def _write_mindir(g: Graph, opts: Options, info) -> None:
    write_mindir(g.cell, g.inputs, g.batch, g.path("mindir"))


def _write_onnx(g: Graph, opts: Options, info) -> None:
    # a converter that compiles one shape (ATC) needs the ONNX graph at the golden batch
    fixed = any(get_format(f).fixed_source for f in info.formats) and not opts.preflight_only
    info.onnx = write_onnx(g.cell, g.inputs, g.golden_batch, g.path("onnx"), dynamic=g.batch == "dynamic" and not fixed)


def _write_om(g: Graph, opts: Options, info) -> None:
    report = preflight(g.path("onnx"), opts.precision_mode)
    require_pass(report)  # before ATC runs, naming the operator ATC would refuse
    info.conversion["atc_preflight"] = report
    keep = None
    if opts.precision_mode in FP16_MODES:  # the normalization and the action head stay float32
        keep = os.path.join(g.dir, KEEP_FILE)
        info.conversion["atc_keep_dtype"] = {"file": KEEP_FILE, "nodes": write_keep_dtype(g.path("onnx"), keep),
                                             "parts": ["observation preprocessing", "action head"]}
    if opts.preflight_only:
        info.formats.remove("om")
    else:
        info.conversion["om"] = write_om(g.path("onnx"), g.path("om"), g.inputs, g.golden_batch, opts.soc_version,
                                         opts.precision_mode, keep)


def _write_lite(g: Graph, opts: Options, info) -> None:
    info.conversion["lite"] = write_lite(g.path("onnx"), g.path("lite"), opts.lite_target, opts.lite_precision_mode)


WRITERS = {w.name: w for w in (
    FormatWriter("mindir", _no_check, _write_mindir),
    FormatWriter("onnx", _check_onnx, _write_onnx),
    FormatWriter("om", _check_om, _write_om),
    FormatWriter("lite", _check_lite, _write_lite),
)}
"""One writer per entry of deploy.formats.FORMATS (a test keeps the two equal)."""


def parse_formats(text: str) -> List[str]:
    """``--format``'s comma-separated names (the formats every export writes added first)."""
    formats = [f.strip().lower() for f in text.split(",") if f.strip()]
    if not formats or any(f not in NAMES for f in formats):
        raise ConfigError(f"--format {text!r}: expected a comma-separated subset of {', '.join(NAMES)}")
    return [f.name for f in FORMATS if f.always and f.name not in formats] + formats


def plan(formats: Iterable[str], opts: Options) -> List[str]:
    """The formats to write, in the order the manifest lists them: the requested ones, each preceded
    by the formats it is converted from where missing; then every writer's check, before any work."""
    formats = list(formats)
    for f in list(formats):
        missing = [r for r in get_format(f).requires if r not in formats]
        for r in missing:
            formats.insert(formats.index(f), r)
    for w in WRITERS.values():
        w.check(opts, w.name in formats)
    return formats


def write_formats(graph: Graph, opts: Options, info) -> None:
    """Every format of ``info.formats`` and every one each export writes, in the registry's order
    (a source before its conversions)."""
    for fmt in FORMATS:
        if fmt.always or fmt.name in info.formats:
            WRITERS[fmt.name].write(graph, opts, info)
