"""benchmarks/zoo_thresholds.yaml covers exactly the shipped configs, each entry complete, so a
new config without a threshold fails here rather than being skipped by benchmarks/zoo.py."""
import os

import yaml

from msrl_consistent.config import shipped_configs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _entries():
    with open(os.path.join(ROOT, "benchmarks", "zoo_thresholds.yaml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def test_thresholds_cover_exactly_the_shipped_configs():
    assert sorted(_entries()) == sorted(shipped_configs())


def test_every_entry_has_episodes_threshold_and_a_short_budget():
    for name, e in _entries().items():
        assert set(e) <= {"eval_episodes", "threshold", "full_fits", "short"}, name
        assert isinstance(e["eval_episodes"], int) and e["eval_episodes"] > 0, name
        assert isinstance(e["threshold"], (int, float)), name
        assert isinstance(e.get("full_fits", True), bool), name
        short = e["short"]
        assert {"steps", "threshold", "reason"} <= set(short) <= {"steps", "threshold", "reason", "set"}, name
        assert all(isinstance(kv, str) and "=" in kv for kv in short.get("set", [])), name
        assert isinstance(short["steps"], int) and short["steps"] > 0, name
        assert isinstance(short["threshold"], (int, float)) and short["reason"].strip(), name
