"""Recorded traces, `msrl replay`, and the precision sweep."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from msrl_consistent.cli import main
from msrl_consistent.export.exporter import export_run
from msrl_consistent.recording import read_trace
from msrl_consistent.runtime import load_policy


@pytest.fixture(scope="module")
def pend_exports(pendulum_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("rp")
    fp32 = str(root / "fp32")
    fp16 = str(root / "fp16")
    export_run(pendulum_run, fp32, formats=["mindir", "onnx"], golden=64, precision_sweep=True, sweep_episodes=2)
    export_run(pendulum_run, fp16, precision="fp16", golden=64)
    return fp32, fp16


def test_onnxruntime_trace_replays_against_training_cell(pend_exports, tmp_path, capsys):
    fp32, _ = pend_exports
    trace = str(tmp_path / "ort.npz")
    assert main(["eval", fp32, "--backend", "onnxruntime", "--episodes", "2", "--record", trace]) == 0
    t = read_trace(trace)
    assert t["obs"].shape == (400, 3) and t["actions"].shape == (400, 1)
    assert t["meta"]["backend"] == "onnxruntime" and len(t["meta"]["episodes"]) == 2
    assert t["rewards"].shape == (400,) and t["dones"].sum() == 2
    capsys.readouterr()
    rc = main(["replay", fp32, trace, "--json"])
    r = json.loads(capsys.readouterr().out)
    assert rc == 0 and r["passed"] and r["atol"] == 1e-5
    assert r["error"]["max"] <= 1e-5
    assert abs(r["return_impact"]["delta"]) < 1e-3
    assert os.path.isfile(os.path.join(fp32, "replay-train.md"))


def test_fp16_trace_reports_first_divergence(pend_exports, tmp_path, capsys):
    _, fp16 = pend_exports
    trace = str(tmp_path / "fp16.npz")
    pol = load_policy(fp16, backend="mindspore", record=trace)
    rng = np.random.default_rng(0)
    for _ in range(50):
        pol.act(rng.uniform(-1, 1, 3).astype(np.float32))
    pol.recorder.close()
    capsys.readouterr()
    rc = main(["replay", fp16, trace, "--json"])
    r = json.loads(capsys.readouterr().out)
    assert rc == 1 and not r["passed"]
    assert isinstance(r["first_divergence_step"], int) and 0 <= r["first_divergence_step"] < 50
    assert r["error"]["max"] > 1e-5


def test_trace_from_other_artifact_is_integrity_error(pend_exports, cartpole_run, tmp_path, capsys):
    fp32, fp16 = pend_exports
    trace = str(tmp_path / "t.npz")
    pol = load_policy(fp16, backend="mindspore", record=trace)
    pol.act(np.zeros(3, np.float32))
    pol.recorder.close()
    assert main(["replay", fp32, trace]) == 2
    assert "recorded from another artifact" in capsys.readouterr().err


def test_record_limit_bounds_the_trace(pend_exports, tmp_path):
    fp32, _ = pend_exports
    trace = str(tmp_path / "l.npz")
    pol = load_policy(fp32, backend="mindspore", record=trace, record_limit=10)
    for _ in range(25):
        pol.act(np.zeros(3, np.float32))
    pol.recorder.close()
    t = read_trace(trace)
    assert len(t["obs"]) == 10 and t["meta"]["dropped"] == 15


def test_precision_sweep_in_export(pend_exports):
    fp32, _ = pend_exports
    m = json.load(open(os.path.join(fp32, "manifest.json")))
    rows = {r["emulation"]: r for r in m["precision_sweep"]["rows"]}
    assert set(rows) == {"fp32", "fp16-matmul", "fp16", "fp16-kept"}
    assert rows["fp32"]["golden_max_abs_error"] == 0.0 and rows["fp32"]["return_delta"] == 0.0
    assert rows["fp16"]["golden_max_abs_error"] > 0.0
    assert "precision_sweep.md" in m["files"]
    text = open(os.path.join(fp32, "precision_sweep.md")).read()
    assert "force_fp16" in text and "not emulated" in text


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
def test_trace_flushed_on_sigterm(cartpole_run, tmp_path):
    exp = str(tmp_path / "e")
    export_run(cartpole_run, exp, golden=32)
    trace = tmp_path / "sig.npz"
    env = dict(os.environ, GLOG_v="3")
    proc = subprocess.Popen([sys.executable, "-m", "msrl_consistent", "eval", exp, "--episodes", "100000",
                             "--record", str(trace)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # SIGTERM once the process is recording (its handler installed): measured by the CPU time it
        # has used, not by wall time, which a loaded machine stretches
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None and _cpu_seconds(proc.pid) < 12:
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, proc.stderr.read()[-2000:]
    t = read_trace(str(trace))
    assert len(t["obs"]) > 0 and len(t["obs"]) == len(t["actions"])
