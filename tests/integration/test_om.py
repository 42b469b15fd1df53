"""OM through ATC: the command line, tested with a stand-in `atc` that records its arguments
(a test of the command built, not a claim that OM runs here), and the missing-CANN error."""
import json
import os
import stat
import sys

import pytest

from msrl_consistent.cli import main
from msrl_consistent.export.om import atc_command
from msrl_consistent.manifest import read_manifest

STAND_IN = """#!{python}
import json, sys, os
args = sys.argv[1:]
with open(os.environ["ATC_RECORD"], "w") as fh:
    json.dump(args, fh)
out = [a.split("=", 1)[1] for a in args if a.startswith("--output=")][0]
open(out + ".om", "wb").write(b"stand-in om")
"""


def test_atc_command_mapping():
    cmd = atc_command("atc", "/x/actor.onnx", "/x/actor", [("obs", (4,), "float32")], 1, "Ascend310P3", "must_keep_origin_dtype")
    assert cmd == ["atc", "--model=/x/actor.onnx", "--framework=5", "--output=/x/actor", "--soc_version=Ascend310P3",
                   "--input_shape=obs:1,4", "--precision_mode=must_keep_origin_dtype", "--log=error"]
    with pytest.raises(ValueError, match="not an ATC precision mode"):
        atc_command("atc", "a", "b", [("obs", (4,), "float32")], 1, "Ascend310P3", "fp16")


@pytest.fixture
def record(tmp_path, monkeypatch):
    """A stand-in `atc` first on PATH; the file it records its arguments into."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    atc = bindir / "atc"
    atc.write_text(STAND_IN.format(python=sys.executable))
    atc.chmod(atc.stat().st_mode | stat.S_IEXEC)
    path = tmp_path / "args.json"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ATC_RECORD", str(path))
    return path


def test_om_export_with_stand_in_atc(cartpole_run, tmp_path, record):
    out = tmp_path / "om"
    rc = main(["export", cartpole_run, "--out", str(out), "--format", "om", "--soc-version", "Ascend310P3",
               "--batch", "4", "--golden", "64"])
    assert rc == 0
    args = json.loads(record.read_text())
    assert f"--model={out}" not in args  # written in the temporary directory, then renamed
    assert args[0].startswith("--model=") and args[0].endswith("actor.onnx")
    assert "--framework=5" in args and "--soc_version=Ascend310P3" in args
    assert "--input_shape=obs:4,4" in args
    assert "--precision_mode=must_keep_origin_dtype" in args  # always explicit, never ATC's fp16 default
    m = read_manifest(str(out))
    assert {"actor.om", "actor.onnx", "actor.mindir"} <= set(m.files)
    assert m.export.conversion["om"]["precision_mode"] == "must_keep_origin_dtype"
    # an explicit mode is passed through and recorded
    out2 = tmp_path / "om2"
    assert main(["export", cartpole_run, "--out", str(out2), "--format", "om", "--soc-version", "Ascend310P3",
                 "--precision-mode", "force_fp16", "--golden", "64"]) == 0
    assert "--precision_mode=force_fp16" in json.loads(record.read_text())
    assert read_manifest(str(out2)).export.conversion["om"]["precision_mode"] == "force_fp16"


def test_om_without_atc_exit_2(cartpole_run, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no atc here
    rc = main(["export", cartpole_run, "--out", str(tmp_path / "x"), "--format", "om", "--soc-version", "Ascend310P3"])
    err = capsys.readouterr().err
    assert rc == 2 and "atc" in err and "CANN" in err
    assert not (tmp_path / "x").exists()


def test_float16_modes_keep_the_normalization_and_the_head_in_float32(pendulum_run, tmp_path, record):
    """ATC's force_fp16 gets --keep_dtype: a file naming actor.onnx's nodes of the observation
    normalization and of the action head (found from the graph's structure), shipped in the export
    and recorded in the manifest; must_keep_origin_dtype (every dtype kept) gets none."""
    import onnx

    from msrl_consistent.export.keep_dtype import KEEP_FILE
    out = tmp_path / "fp16"
    assert main(["export", pendulum_run, "--out", str(out), "--format", "om", "--soc-version", "Ascend310P3",
                 "--precision-mode", "force_fp16", "--golden", "32"]) == 0
    args = json.loads(record.read_text())
    keep = [a for a in args if a.startswith("--keep_dtype=")]
    assert len(keep) == 1 and keep[0].endswith(KEEP_FILE)
    names = (out / KEEP_FILE).read_text().split()
    types = {n.name: n.op_type for n in onnx.load(str(out / "actor.onnx")).graph.node}
    assert names and set(names) <= set(types)
    kept = [types[n] for n in names]
    # normalization: (obs - mean) / std, clipped to +-10; head: the mean clipped to the Box
    assert kept[:2] == ["Sub", "Div"] and kept.count("Max") == 2 and "Gemm" not in kept and "Tanh" not in kept
    m = read_manifest(str(out))
    assert m.export.conversion["atc_keep_dtype"]["nodes"] == len(names) and KEEP_FILE in m.files
    assert m.export.conversion["om"]["keep_dtype"] == KEEP_FILE
    out2 = tmp_path / "origin"
    assert main(["export", pendulum_run, "--out", str(out2), "--format", "om", "--soc-version", "Ascend310P3",
                 "--golden", "32"]) == 0
    assert not any(a.startswith("--keep_dtype") for a in json.loads(record.read_text()))
    assert not (out2 / KEEP_FILE).exists()
