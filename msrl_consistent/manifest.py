"""manifest.json: what an export directory holds and how it was made, as a typed dataclass.

This module writes manifest.json and gives msrl its typed view; the one reader that validates it is
the deploy package's (:func:`read_export` reads the file once, validates it there and builds the
Manifest from the same parsed JSON); everything else (the runtime, ``msrl verify``, ``msrl
replay``, the exporter) uses :class:`Manifest`'s attributes.

Schema version 1 fields (all required unless marked): schema_version, created, msrl_version,
versions, algorithm, env_id, env, spaces, source, export, io, files, golden, and the optional
precision_sweep. ``files`` maps each artifact file name to its sha256; every command that
reads an export checks them before anything runs.

The validation that every command reading an export goes through first (file names inside the
directory, hashes, mutual consistency of the fields, golden set headers, declared sizes) lives in
:mod:`msrl_consistent.deploy` (:func:`~msrl_consistent.deploy.open_export`), which also ships
inside each export (msrl_deploy.zip, imported by policy.py); :func:`read_manifest` runs it before building the dataclass.
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

from .config import ConfigError
from .deploy import MANIFEST as FILE_NAME
from .deploy import Export, ExportError, open_export, read_manifest_json


class IntegrityError(ExportError):
    """An export directory does not match its manifest, or the manifest is malformed (exit 2)."""


@dataclass
class Source:
    run_dir: str
    """Absolute path of the run directory the policy was exported from."""
    checkpoint: str
    """Absolute path of the checkpoint file."""
    checkpoint_sha256: str
    config: Dict[str, Any]
    """The run's resolved config."""


@dataclass
class ExportInfo:
    formats: List[str]
    """Artifacts written: mindir, onnx, om."""
    precision: str
    """fp32 or fp16 (the cell computing in float16 with float32 input and output)."""
    batch: Union[int, str]
    """The MindIR's batch: a fixed size or "dynamic"."""
    golden_batch: int
    """Batch shape of the fixed-shape artifacts (ONNX, OM) and of the golden set's reference calls."""
    conversion: Dict[str, Any] = field(default_factory=dict)
    """Converter options (om: the ATC command and precision mode; lite: the precision default)."""
    onnx: Optional[Dict[str, Any]] = None
    """ONNX details (batch, opset, input/output names and element types) when exported."""

    @property
    def dynamic(self) -> bool:
        return self.batch == "dynamic"


@dataclass
class GoldenInfo:
    file: str
    count: int
    batch: int
    reference: str
    rollout: int = 0
    bounds: int = 0
    episodes: int = 0
    seed: int = 0
    sequences: Optional[Dict[str, int]] = None
    """A recurrent export's golden sequences: lanes (envs stepped together), steps, episode_starts."""


@dataclass
class Manifest:
    schema_version: int
    created: str
    msrl_version: str
    versions: Dict[str, str]
    algorithm: str
    env_id: str
    env: Dict[str, Any]
    """The EnvConfig the policy was trained with (keys of msrl_consistent.config.EnvConfig)."""
    spaces: Dict[str, Any]
    """Observation and action spaces (envs.SpaceSpec.to_json)."""
    source: Source
    export: ExportInfo
    io: Dict[str, Any]
    """input/output name, shape (None: dynamic) and dtype, and the post-processing inside the cell."""
    files: Dict[str, str]
    """File name -> sha256 of every artifact."""
    golden: GoldenInfo
    precision_sweep: Optional[Dict[str, Any]] = None

    # -- JSON --------------------------------------------------------------------------------
    def to_json(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        if d["precision_sweep"] is None:
            del d["precision_sweep"]
        if d["export"]["onnx"] is None:
            del d["export"]["onnx"]
        if d["golden"]["sequences"] is None:
            del d["golden"]["sequences"]
        return d

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Manifest":
        """The typed view of a manifest the deploy package validated (:func:`read_export`): its
        fields, types and consistency are checked there, once."""
        return _build(cls, d)

    def env_config(self):
        from .config import EnvConfig, build_dataclass
        try:
            return build_dataclass(EnvConfig, self.env, FILE_NAME, "env.")
        except ConfigError as exc:
            raise IntegrityError(str(exc)) from None


def _build(cls, d: Dict[str, Any]):
    """``cls`` (a dataclass) from its JSON object, nested dataclass fields built the same way."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in d:
            tp = hints[f.name]
            kwargs[f.name] = _build(tp, d[f.name]) if dataclasses.is_dataclass(tp) else d[f.name]
    return cls(**kwargs)


# -- reading and writing ----------------------------------------------------------------------
def manifest_path(export_dir: str) -> str:
    return os.path.join(export_dir, FILE_NAME)


def read_export(export_dir: str, hashes: bool = True, golden: bool = True) -> Tuple[Export, Manifest]:
    """Read manifest.json once, validate the export directory with it
    (:func:`msrl_consistent.deploy.open_export`: names, hashes, consistency, golden set) and build
    the typed Manifest from the same parsed JSON; every failure is an IntegrityError (exit 2)."""
    from .directories import EXPORT, expect
    expect(export_dir, EXPORT)
    try:
        d = read_manifest_json(export_dir)
        export = open_export(export_dir, hashes=hashes, golden=golden, manifest=d)  # the one validation
        manifest = Manifest.from_json(d)
    except IntegrityError:
        raise
    except ExportError as exc:
        raise IntegrityError(str(exc)) from None
    return export, manifest


def read_manifest(export_dir: str, hashes: bool = True, golden: bool = True) -> Manifest:
    """The typed manifest of a validated export directory (:func:`read_export`)."""
    return read_export(export_dir, hashes, golden)[1]


def write_manifest(directory: str, manifest: Manifest) -> None:
    from .checkpoint import atomic_write_text
    atomic_write_text(manifest_path(directory), json.dumps(manifest.to_json(), indent=2) + "\n")


def versions() -> Dict[str, str]:
    import gymnasium
    import mindspore
    import numpy

    from . import __version__

    out = {"msrl_consistent": __version__, "mindspore": mindspore.__version__,
           "numpy": numpy.__version__, "gymnasium": gymnasium.__version__,
           "python": platform.python_version()}
    try:
        import onnx
        out["onnx"] = onnx.__version__
    except ImportError:
        pass
    return out


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
