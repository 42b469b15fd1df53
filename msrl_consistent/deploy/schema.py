"""manifest.json's schema, written once: the dataclasses below name every field, its JSON type
and whether it may be absent. The typed view msrl uses (msrl_consistent.manifest.Manifest, built
on :class:`Manifest`) and the validator's table (:data:`SCHEMA`, which fields.check_schema walks
before the reader checks the fields' meaning) both come from them.

The rules from a field's annotation to its JSON type: ``int``, ``str``; ``Dict[str, str]`` is an
object of strings, any other ``Dict`` an object, ``List[str]`` a list of strings; a ``Union``
any of its members; ``Optional`` also null; a nested dataclass an object checked field by field.
A field with a default may be absent; one whose default is None is left out of the JSON when
None. ``metadata={"json": KIND}`` states a field's JSON type where the annotation says more
(a field that is absent rather than null).

Schema version 1; it ships in every export (msrl_deploy.zip): standard library only.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union


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
    """Artifacts written (deploy.formats): mindir, onnx, om, lite."""
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
    sequences: Optional[Dict[str, int]] = field(default=None, metadata={"json": "dict"})
    """A recurrent export's golden sequences: lanes (envs stepped together), steps, episode_starts."""


@dataclass
class Manifest:
    """Every field of manifest.json (schema version 1)."""

    schema_version: int
    created: str
    msrl_version: str
    versions: Dict[str, str]
    algorithm: str
    env_id: str
    env: Dict[str, Any]
    """The EnvConfig the policy was trained with (keys of msrl_consistent.config.EnvConfig)."""
    spaces: Dict[str, Any]
    """Observation and action spaces (deploy.spaces.SpaceSpec.to_json)."""
    source: Source
    export: ExportInfo
    io: Dict[str, Any]
    """input/output name, shape (None: dynamic) and dtype, and the post-processing inside the cell."""
    files: Dict[str, str]
    """File name -> sha256 of every artifact."""
    golden: GoldenInfo
    precision_sweep: Optional[Dict[str, Any]] = None
    env_recipe: Optional[Dict[str, Any]] = None
    """What the environment was made from (msrl_consistent.envs.recipe): id or entry point, kwargs,
    wrappers, the modules' versions or file sha256, gymnasium's version."""
    host_preprocessing: Optional[List[Any]] = field(default=None, metadata={"json": "list"})
    """The env.wrappers that change observations or actions outside the graph: each {entry, kwargs,
    kind}, in the order the board must apply them around every call."""

    def to_json(self) -> Dict[str, Any]:
        """The JSON object manifest.json holds (fields whose default is None left out when None)."""
        return _to_json(self)

    @classmethod
    def from_json(cls, d: Dict[str, Any]):
        """The typed view of a manifest the reader validated (its fields, types and consistency
        are checked there, once)."""
        return _build(cls, d)


def _kind(tp: Any) -> Any:
    """The JSON type of an annotation (the module docstring's rules)."""
    if dataclasses.is_dataclass(tp):
        return schema_of(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union:
        return "|".join("null" if a is type(None) else _kind(a) for a in args)
    if origin is dict:
        return "dict[str]" if args[1] is str else "dict"
    if origin is list:
        return "list[str]" if args and args[0] is str else "list"
    return {int: "int", str: "str"}[tp]


def _optional(f: dataclasses.Field) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def schema_of(cls) -> Dict[str, Any]:
    """``{name (with '?' where it may be absent): JSON type or nested schema}`` of a dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name + ("?" if _optional(f) else ""): f.metadata.get("json") or _kind(hints[f.name])
            for f in dataclasses.fields(cls)}


def _to_json(obj) -> Dict[str, Any]:
    d = dataclasses.asdict(obj)
    _drop_none(type(obj), d)
    return d


def _drop_none(cls, d: Dict[str, Any]) -> None:
    """Leave out the fields whose default is None where they are None, nested dataclasses too."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.default is None and d.get(f.name) is None:
            d.pop(f.name, None)
        elif dataclasses.is_dataclass(hints[f.name]):
            _drop_none(hints[f.name], d[f.name])


def _build(cls, d: Dict[str, Any]):
    """``cls`` (a dataclass) from its JSON object, nested dataclass fields built the same way."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in d:
            tp = hints[f.name]
            kwargs[f.name] = _build(tp, d[f.name]) if dataclasses.is_dataclass(tp) else d[f.name]
    return cls(**kwargs)


SCHEMA: Dict[str, Any] = schema_of(Manifest)
"""The manifest's fields and JSON types, as fields.check_schema walks them."""
