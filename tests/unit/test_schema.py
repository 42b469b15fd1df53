"""One manifest schema: the validator's table and the typed view both come from deploy/schema.py."""
import dataclasses

from msrl_consistent import manifest as mf
from msrl_consistent.deploy import SCHEMA, fields, schema

# The table the validator walked when it was written by hand: the derived one must not differ.
WRITTEN = {
    "schema_version": "int", "created": "str", "msrl_version": "str", "versions": "dict[str]", "algorithm": "str",
    "env_id": "str", "env": "dict", "spaces": "dict",
    "source": {"run_dir": "str", "checkpoint": "str", "checkpoint_sha256": "str", "config": "dict"},
    "export": {"formats": "list[str]", "precision": "str", "batch": "int|str", "golden_batch": "int",
               "conversion?": "dict", "onnx?": "dict|null"},
    "io": "dict", "files": "dict[str]",
    "golden": {"file": "str", "count": "int", "batch": "int", "reference": "str", "rollout?": "int",
               "bounds?": "int", "episodes?": "int", "seed?": "int", "sequences?": "dict"},
    "precision_sweep?": "dict|null", "env_recipe?": "dict|null", "host_preprocessing?": "list",
}


def test_the_validator_table_is_derived_from_the_dataclasses():
    assert SCHEMA == WRITTEN
    assert list(SCHEMA) == list(WRITTEN)  # the order check_schema reports the first missing field in
    assert fields.SCHEMA is schema.SCHEMA


def test_the_typed_view_is_the_schema_dataclass():
    assert issubclass(mf.Manifest, schema.Manifest)
    assert mf.ExportInfo is schema.ExportInfo and mf.GoldenInfo is schema.GoldenInfo and mf.Source is schema.Source
    assert [f.name for f in dataclasses.fields(mf.Manifest)] == [k.rstrip("?") for k in SCHEMA]


def test_json_leaves_out_the_absent_fields_and_round_trips():
    m = mf.Manifest(schema_version=1, created="t", msrl_version="v", versions={"a": "1"}, algorithm="ppo",
                    env_id="CartPole-v1", env={}, spaces={}, source=mf.Source("r", "c", "0" * 64, {}),
                    export=mf.ExportInfo(["mindir"], "fp32", "dynamic", 1), io={}, files={},
                    golden=mf.GoldenInfo("golden.npz", 4, 1, "training cell, fp32"))
    d = m.to_json()
    assert "precision_sweep" not in d and "onnx" not in d["export"] and "sequences" not in d["golden"]
    assert d["export"]["conversion"] == {} and d["golden"]["rollout"] == 0
    back = mf.Manifest.from_json(d)
    assert isinstance(back, mf.Manifest) and back == m and back.to_json() == d
