"""The export formats, one :class:`Format` entry each: what ``--format`` accepts, the file each
writes, what it is converted from and the batch its file is called with.

The reader (export.formats, files, each backend's model file), ``msrl export`` (``--format``,
the writers of msrl_consistent.export.writers, one per entry here) and the deployed backends
(:mod:`.backends`, which name the formats they run) all consult this table; nothing else lists
the formats. It ships in every export (msrl_deploy.zip), so it needs nothing but the standard
library.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

from .errors import ExportError


@dataclass(frozen=True)
class Format:
    """One export format."""

    name: str
    """What ``--format`` and the manifest's export.formats call it."""
    file: str
    """The model file it writes into the export directory."""
    requires: Tuple[str, ...]
    """The formats it is converted from: ``msrl export`` writes them first (adding them when missing)."""
    batch: str
    """The Export attribute holding the batch its file must be called with (None there: any):
    ``batch`` (the export's own), ``onnx_batch`` (the ONNX graph's, which converted files keep)
    or ``golden_batch`` (a file compiled for one shape)."""
    tool: str
    """What writing it needs beyond msrl's dependencies ("" : nothing)."""
    always: bool = False
    """Written by every export (the reference artifact verify and the converters read)."""
    fixed_source: bool = False
    """Its converter compiles one input shape: the graph it converts must have a fixed batch."""
    reexport: bool = True
    """A missing file is fixed by exporting again with ``--format NAME`` (not so where the format
    needs a device toolkit the exporting machine may not have)."""


FORMATS: Tuple[Format, ...] = (
    Format("mindir", "actor.mindir", (), "batch", "", always=True),
    Format("onnx", "actor.onnx", (), "onnx_batch", "the onnx package"),
    Format("om", "actor.om", ("onnx",), "golden_batch", "CANN's ATC (--soc-version)", fixed_source=True,
           reexport=False),
    Format("lite", "actor_lite.mindir", ("onnx",), "onnx_batch", "MindSpore Lite's converter (msrl lite install)"),
)
BY_NAME: Dict[str, Format] = {f.name: f for f in FORMATS}
NAMES: Tuple[str, ...] = tuple(BY_NAME)
FORMAT_FILE: Dict[str, str] = {f.name: f.file for f in FORMATS}
"""A derived view: format name -> its file."""


def get_format(name: str) -> Format:
    """The entry of ``name``, or an ExportError naming the known formats."""
    try:
        return BY_NAME[name]
    except (KeyError, TypeError):
        raise ExportError(f"unknown export format {name!r}; expected one of {', '.join(NAMES)}") from None


def format_of_file(file: str) -> Format:
    """The entry whose file is ``file``."""
    return next(f for f in FORMATS if f.file == file)
