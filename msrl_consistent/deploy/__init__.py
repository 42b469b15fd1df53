"""Run an export directory where it is deployed, and prove it there: a self-contained package.

This package needs only the Python standard library and NumPy at import time; each backend's
library is imported when that backend is chosen. ``msrl export`` ships it in every export
directory as ``msrl_deploy.zip`` beside a short ``policy.py`` entry (both with their sha256 in
the manifest), so on a board with nothing but NumPy and a backend library installed::

    python policy.py check [--backend onnxruntime|mindspore_lite|om|mindspore]   # exit 0 / 1 / 2

    from policy import load
    pi = load(".", backend="lite")
    action = pi.act(obs)

Inside msrl (``msrl_consistent.deploy``) it is the one inference path of every export
backend (``runtime.load_policy``) and the one validating opener of export directories
(:func:`open_export`), used by ``msrl verify``, ``msrl eval``, ``msrl replay`` and ``check``.

Validation before anything runs (:func:`open_export`), each failure an :class:`ExportError`
naming the file and what is wrong (exit 2):

* manifest.json: a regular JSON object of bounded size, schema version 1, the fields used here
  present with the right types and mutually consistent (spaces, io shapes and dtypes, export
  batch, golden set), declared sizes bounded before anything is allocated;
* files: plain names inside the directory (no separator, no ``..``, no link leading out), each
  present as a regular file with its sha256;
* golden.npz: read without pickle, its arrays' shapes and dtypes checked against the manifest
  from the .npy headers before any array is allocated; observations finite;
* the chosen backend's model file: listed in the manifest, loadable, and it runs on the
  manifest's input shape.

Exit codes of ``check`` (and of ``msrl verify``): 0 pass, 1 the artifact loads but acts
differently from the training cell, 2 integrity or environment error (one line).

The modules, one concern each: ``errors`` and ``names`` (the vocabulary: errors, exit codes,
schema version, file names, limits), ``formats`` (one entry per export format), ``fields`` (typed manifest fields), ``spaces``
(:class:`SpaceSpec`, the one description of the observation and action spaces, shared with
training), ``reader`` (:class:`Export`, :func:`open_export`), ``golden``,
``backends`` (one entry per backend, its loader and runner), ``lite`` (MindSpore Lite's call sequence on its Python module
or msrl's C shim), ``lite_process`` (Lite in a process of its own where MindSpore is installed),
``inputs`` (validate and pack observations per space),
``policy`` (:class:`Policy`, :func:`load`), ``guard``, ``frames`` (:class:`FrameStack`,
:class:`MaxAndSkip`), ``recurrent`` (a recurrent policy's carried state and the manifest's
``io.state``), ``sequences`` (golden sequences through the deployed loop, step by step, and the
named state faults), ``compare`` (:func:`compare_actions`) and ``check`` (``python policy.py check``).
"""

from .backends import (
    ALIASES,
    BACKENDS,
    REGISTRY,
    Backend,
    Runner,
    canonical_backend,
    default_atol,
    make_runner,
    require_model_file,
)
from .check import check, compare_actions, golden_check, latency, main
from .errors import EXIT_ERROR, EXIT_MISMATCH, EXIT_PASS, BackendUnavailable, ExportError, GuardError
from .fields import SCHEMA, check_schema, column_n, not_an_index, plain_name, space_text
from .formats import FORMAT_FILE, FORMATS, Format
from .frames import FrameStack, MaxAndSkip
from .guard import Guard
from .lite import lite_context
from .names import (
    BUNDLE_FILE,
    BUNDLE_PACKAGE,
    CROSS_RUNTIME_ATOL,
    LITE_ASCEND_PRECISION_MODES,
    LITE_CPU_PRECISION_MODES,
    MANIFEST,
    MAX_BATCH,
    MAX_DIM,
    MAX_FILES,
    MAX_GOLDEN,
    MAX_MANIFEST_BYTES,
    MAX_ROW_BYTES,
    SCHEMA_VERSION,
    memory_bytes,
)
from .policy import ExportPolicy, Policy, auto_fallback, available_backends, guard_for, in_chunks, load
from .reader import Export, file_sha256, open_export, read_manifest_json
from .sampling import Distribution
from .spaces import SpaceSpec

__all__ = [
    "ALIASES", "BACKENDS", "BUNDLE_FILE", "BUNDLE_PACKAGE", "CROSS_RUNTIME_ATOL", "EXIT_ERROR", "EXIT_MISMATCH",
    "EXIT_PASS", "FORMAT_FILE", "FORMATS", "REGISTRY", "Backend", "Format", "LITE_ASCEND_PRECISION_MODES",
    "LITE_CPU_PRECISION_MODES", "MANIFEST",
    "MAX_BATCH", "MAX_DIM", "MAX_FILES", "MAX_GOLDEN", "MAX_MANIFEST_BYTES", "MAX_ROW_BYTES", "SCHEMA",
    "SCHEMA_VERSION", "BackendUnavailable", "Distribution",
    "SpaceSpec", "Export", "ExportError", "ExportPolicy", "FrameStack", "Guard",
    "GuardError", "MaxAndSkip", "Policy", "Runner", "auto_fallback", "available_backends", "canonical_backend", "check",
    "check_schema", "column_n", "compare_actions", "default_atol", "file_sha256", "golden_check", "guard_for", "in_chunks",
    "latency", "lite_context", "load", "main", "make_runner", "memory_bytes", "not_an_index", "open_export",
    "plain_name", "read_manifest_json", "require_model_file", "space_text",
]
