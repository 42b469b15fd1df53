"""directories.kind / expect: what a directory is, and the one-line refusal of the wrong one."""
import json

import pytest
from helpers import msrl

from msrl_consistent.config import ConfigError
from msrl_consistent.directories import EXPORT, NEITHER, RUN, expect, kind


@pytest.fixture
def dirs(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("algorithm: ppo\n")
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "manifest.json").write_text(json.dumps({}))
    (tmp_path / "empty").mkdir()
    return tmp_path


def test_kind(dirs):
    assert kind(str(dirs / "run")) == RUN
    assert kind(str(dirs / "export")) == EXPORT
    assert kind(str(dirs / "empty")) == NEITHER
    assert kind(str(dirs / "missing")) == NEITHER
    (dirs / "file").write_text("x")
    assert kind(str(dirs / "file")) == NEITHER


def test_a_broken_manifest_link_is_still_an_export(dirs):
    (dirs / "linked").mkdir()
    (dirs / "linked" / "manifest.json").symlink_to(dirs / "nowhere.json")
    assert kind(str(dirs / "linked")) == EXPORT  # the reader names what is wrong with it


def test_expect_returns_the_kind(dirs):
    assert expect(str(dirs / "run"), RUN) == RUN
    assert expect(str(dirs / "export"), RUN, EXPORT) == EXPORT


@pytest.mark.parametrize("name, kinds, message", [
    ("missing", (RUN, EXPORT), "no such run or export directory: {p}"),
    ("missing", (EXPORT,), "no such export directory: {p}"),
    ("empty", (EXPORT,), "{p} is not an export directory (no manifest.json)"),
    ("empty", (RUN,), "{p} is not a run directory (no config.yaml)"),
    ("empty", (RUN, EXPORT), "{p} is neither a run directory (no config.yaml) nor an export directory (no manifest.json)"),
    ("run", (EXPORT,), "{p} is a run directory, not an export directory (no manifest.json); export it first with "
                       "`msrl export {p} --out DIR`"),
    ("export", (RUN,), "{p} is an export directory, not a run directory (no config.yaml)"),
])
def test_expect_says_what_it_is_and_what_was_expected(dirs, name, kinds, message):
    p = str(dirs / name)
    with pytest.raises(ConfigError) as exc:
        expect(p, *kinds)
    assert str(exc.value) == message.format(p=p)


@pytest.mark.parametrize("name, said", [
    ("empty", "empty is not an export directory (no manifest.json)"),
    ("run", "run is a run directory, not an export directory (no manifest.json); export it first"),
    ("missing", "no such export directory: missing"),
])
def test_verify_of_a_directory_that_is_no_export_says_so(dirs, name, said):
    # `msrl verify DIR` on a directory that is neither used to say "DIR is a run directory"
    r = msrl("verify", name, cwd=dirs)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith(f"msrl: error: {said}"), lines[0]
