"""manifest.json: what an export directory holds and how it was made, as a typed dataclass.

This module writes manifest.json and gives msrl its typed view; the one reader that validates it is
the deploy package's (:func:`read_export` reads the file once, validates it there and builds the
Manifest from the same parsed JSON); everything else (the runtime, ``msrl verify``, ``msrl
replay``, the exporter) uses :class:`Manifest`'s attributes.

The fields, their JSON types and which may be absent are written once, as the dataclasses of
:mod:`msrl_consistent.deploy.schema`, from which the validator's table comes too. ``files`` maps
each artifact file name to its sha256; every command that reads an export checks them before
anything runs.

The validation that every command reading an export goes through first (file names inside the
directory, hashes, mutual consistency of the fields, golden set headers, declared sizes) lives in
:mod:`msrl_consistent.deploy` (:func:`~msrl_consistent.deploy.open_export`), which also ships
inside each export (msrl_deploy.zip, imported by policy.py); :func:`read_manifest` runs it before building the dataclass.
"""
from __future__ import annotations

import json
import os
import platform
import time
from typing import Dict, Tuple

from .config import ConfigError
from .deploy import MANIFEST as FILE_NAME
from .deploy import Export, ExportError, open_export, read_manifest_json, schema
from .deploy.schema import ExportInfo, GoldenInfo, Source

__all__ = ["ExportInfo", "GoldenInfo", "IntegrityError", "Manifest", "Source", "read_export", "read_manifest",
           "write_manifest"]


class IntegrityError(ExportError):
    """An export directory does not match its manifest, or the manifest is malformed (exit 2)."""


class Manifest(schema.Manifest):
    """The typed manifest (its fields: :mod:`msrl_consistent.deploy.schema`), with the
    environment config it was trained with."""

    def env_config(self):
        from .config import EnvConfig, build_dataclass
        try:
            return build_dataclass(EnvConfig, self.env, FILE_NAME, "env.")
        except ConfigError as exc:
            raise IntegrityError(str(exc)) from None


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
