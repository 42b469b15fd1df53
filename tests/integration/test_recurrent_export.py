"""A recurrent policy's export: the state as graph inputs and outputs (MindIR, ONNX with a symbolic
batch, OM's input shapes), the manifest's state section, golden sequences checked step by step
through the deployed loop, the named faults of planted state bugs, the guard's fallback with the
carried state, and the bundle's check on a board with only NumPy and ONNX Runtime."""
import importlib
import json
import os
import shutil

import numpy as np
import pytest
from helpers import board, om_behind_onnx, run_doc_python, train_run

from msrl_consistent import deploy
from msrl_consistent.config import ConfigError
from msrl_consistent.deploy import recurrent as rec
from msrl_consistent.deploy.graph_io import ObsInput, graph_inputs
from msrl_consistent.export import exporter, writers
from msrl_consistent.export.om import atc_command
from msrl_consistent.export.verify import verify_export

check_module = importlib.import_module("msrl_consistent.deploy.check")
CONFIG = "ppo/CartPoleNoVel-v1-lstm.yaml"
SMALL = ["total_timesteps=256", "env.n_envs=4", "algo.n_steps=8", "algo.batch_size=16", "algo.n_epochs=2",
         "policy.lstm_hidden_size=16", "eval.freq=0", "eval.episodes=2"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("recurrent-export")
    run_dir, _, _ = train_run(root, CONFIG, SMALL, "run")
    out = str(root / "export")
    exporter.export_run(run_dir, out, formats=["mindir", "onnx"], golden=400)
    return run_dir, out


def test_manifest_records_the_state_and_golden_sequences(exported):
    _, out = exported
    m = json.load(open(os.path.join(out, "manifest.json")))
    assert m["io"]["state"] == rec.state_io(16, None)
    assert [i["name"] for i in m["io"]["state"]["inputs"]] == ["h", "c", "episode_start"]
    assert m["export"]["onnx"]["batch"] == "dynamic"  # the ExpandDims' batch constant made -1, then proven
    assert m["export"]["onnx"]["inputs"] == ["obs", "h", "c", "episode_start"]
    assert m["export"]["onnx"]["outputs"] == ["action", "h_next", "c_next"]
    assert m["golden"]["sequences"]["lanes"] == 2 and m["golden"]["sequences"]["steps"] == 200
    g = deploy.open_export(out).golden_sequences()
    assert g["obs"].shape == (200, 2, 4) and g["h"].shape == (200, 2, 16)
    assert (g["episode_starts"][0] == 1).all() and g["episode_starts"][1:].sum() > 0  # episodes end inside lanes


def test_verify_mindspore_bitwise_and_onnxruntime_within_atol(exported):
    _, out = exported
    for backend, atol in (("mindspore", 0.0), ("onnxruntime", 1e-5)):
        r = verify_export(out, backend=backend, episodes=3, write_report=False)
        g = r["golden"]
        assert r["passed"], (backend, r["criteria"])
        assert g["agreement"] == 1.0 and g["first_divergence"] is None and g["max_state_error_scaled"] <= atol
        assert len(g["state_error_per_step"]) == 200
        assert r["rollouts"]["identical_episodes"] == 3
    assert verify_export(out, backend="mindspore", episodes=0, write_report=False)["golden"]["max_state_error"] == 0.0


def test_float64_reference_tells_rounding_from_a_fault(exported):
    """verify on ONNX Runtime measures both float32 runs against the exported graph made float64:
    the twin computes the same function (states within float32 rounding of the training cell's),
    a backend within twice the farther float32 evaluation's distance from it (the training cell's,
    ONNX's float32 reference evaluator's) is called rounding, a perturbed one not."""
    from msrl_consistent.export.exact import describe, float64_reference, reference_states

    _, out = exported
    ref = verify_export(out, backend="onnxruntime", episodes=0, write_report=False)["golden"]["float64_reference"]
    # both sides within 1e-6 of exact arithmetic: the LSTM's pow sigmoid (MindSpore's CPU Sigmoid
    # kernel put the training cell ~2e-6 from it on this policy, ten times ONNX Runtime's distance)
    assert 0 < ref["training_cell"]["max_c_error"] < 1e-6 and ref["backend"]["max_c_error"] < 1e-6
    assert ref["training_cell"]["max_h_error"] < 1e-6 and ref["backend"]["max_h_error"] < 1e-6
    assert "float64 reference" in describe(ref)
    assert "float64_reference" not in verify_export(out, backend="mindspore", episodes=0, write_report=False)["golden"]
    g = deploy.open_export(out).golden_sequences()
    exact = reference_states(os.path.join(out, "actor.onnx"), g["obs"], g["episode_starts"], 16)
    assert exact[0].dtype == np.float64 and exact[0].shape == g["h"].shape
    assert float64_reference(out, g, (g["h"], g["c"]), 16)["rounding"]
    off = float64_reference(out, g, (g["h"] + np.float32(1e-4), g["c"]), 16)
    assert not off["rounding"] and off["backend"]["max_h_error"] > 9e-5 and "not float32 rounding alone" in describe(off)
    os.rename(os.path.join(out, "actor.onnx"), os.path.join(out, "actor.onnx.away"))
    try:
        assert "actor.onnx" in float64_reference(out, g, (g["h"], g["c"]), 16)["skipped"]
    finally:
        os.rename(os.path.join(out, "actor.onnx.away"), os.path.join(out, "actor.onnx"))


def _not_fed_back(monkeypatch):
    update = rec.RecurrentState.update
    monkeypatch.setattr(rec.RecurrentState, "update", lambda self, h, c: update(self, np.zeros_like(h), np.zeros_like(c)))


def _reset_late(monkeypatch):
    """reset(mask) keeps the mask, and the flags reach the graph one step after the episode started."""
    reset, inputs = rec.RecurrentState.reset, rec.RecurrentState.inputs

    def late_reset(self, mask=None):
        if mask is None:
            return reset(self, None)
        self.pending = np.asarray(mask)

    def late_inputs(self, n):
        h, c, s = inputs(self, n)
        due = getattr(self, "due", None)
        if due is not None:
            self.starts = np.where(due, np.float32(1.0), s).astype(np.float32)
        self.due, self.pending = getattr(self, "pending", None), None
        return self.h, self.c, self.starts

    monkeypatch.setattr(rec.RecurrentState, "reset", late_reset)
    monkeypatch.setattr(rec.RecurrentState, "inputs", late_inputs)


@pytest.mark.parametrize("plant, words", [(_not_fed_back, "state not fed back: at step 1"),
                                          (_reset_late, "reset one step late")], ids=["not-fed-back", "reset-late"])
def test_planted_loop_bugs_fail_the_check_by_name(exported, monkeypatch, plant, words):
    _, out = exported
    assert check_module.check(out, "onnxruntime", latency_seconds=0, write_report=False)["passed"]
    plant(monkeypatch)
    r = check_module.check(out, "onnxruntime", latency_seconds=0, write_report=False)
    assert not r["passed"]
    assert r["golden"]["first_divergence"] is not None
    assert any(words in f for f in r["golden"]["faults"]), r["golden"]["faults"]


def test_a_fixed_initial_state_inside_the_graph_is_named(exported, monkeypatch, tmp_path):
    """An artifact whose graph ignores its h, c inputs (h0, c0 baked in as zeros): verify fails
    and names it; the golden set and the manifest are the honest ones."""
    from mindspore import nn

    run_dir, _ = exported

    class FixedState(nn.Cell):
        def __init__(self, cell):
            super().__init__()
            self.cell = cell

        def construct(self, obs, h, c, episode_start):
            return self.cell(obs, h * 0.0, c * 0.0, episode_start)

    write = writers.write_mindir
    monkeypatch.setattr(writers, "write_mindir", lambda cell, *a, **k: write(FixedState(cell), *a, **k))
    bad = str(tmp_path / "fixed")
    exporter.export_run(run_dir, bad, golden=64)
    r = verify_export(bad, backend="mindspore", episodes=0, write_report=False)
    assert not r["passed"]
    names = [c["name"] for c in r["criteria"] if not c["passed"]]
    assert any("a fixed initial state inside the graph" in n for n in names), names
    assert not any("not fed back" in n for n in names)  # the loop is right: only the graph is named


def test_guard_fallback_steps_from_the_carried_state(exported):
    """A primary that returns NaN states on some calls: the fallback steps from the same carried
    state, so the guarded loop acts and carries exactly as the fallback alone."""
    _, out = exported
    g = deploy.open_export(out).golden_sequences()
    guarded = deploy.load(out, backend="onnxruntime", guard=True, fallback="mindspore")
    inner, calls = guarded.runner.run_all, {"n": 0}

    def faulty(xs):
        calls["n"] += 1
        outs = inner(xs)
        if calls["n"] % 5 == 0:
            outs[1] = np.full_like(outs[1], np.nan)
        return outs

    guarded.runner.run_all = faulty
    alone = deploy.load(out, backend="mindspore")
    for pi in (guarded, alone):
        pi.reset()
    for t in range(len(g["obs"])):
        if t and g["episode_starts"][t].any():
            for pi in (guarded, alone):
                pi.reset(g["episode_starts"][t] > 0)
        a, b = guarded.act(g["obs"][t]), alone.act(g["obs"][t])
        assert np.array_equal(a, b)
    st = guarded.guard_stats()
    assert st["violations"]["nonfinite"] > 0 and st["fallbacks"] == st["violations"]["nonfinite"]
    # the carried state after a fallback step is the fallback's: ONNX Runtime vs MindSpore differ in
    # the last bits, so compare within float32 rounding
    np.testing.assert_allclose(guarded._state.h, alone._state.h, atol=1e-5)


def test_fixed_batch_export_and_the_om_input_shapes(exported, tmp_path):
    run_dir, _ = exported
    out = str(tmp_path / "fixed3")
    m = exporter.export_run(run_dir, out, formats=["mindir", "onnx"], batch=3, golden=60)
    assert m.golden.sequences["lanes"] == 3 and m.io["state"]["inputs"][0]["shape"] == [3, 16]
    assert m.export.onnx["batch"] == 3
    for backend in ("mindspore", "onnxruntime"):
        assert check_module.check(out, backend, latency_seconds=0, write_report=False)["passed"], backend
    pi = deploy.load(out, backend="onnxruntime")
    pi.reset()
    assert pi.act(np.zeros((5, 4), np.float32)).shape == (5,)  # 5 envs in calls of 3, the last padded
    state_inputs = graph_inputs([ObsInput("obs", (), (4,), "float32", 0, 4)], 16)
    cmd = atc_command("atc", "a.onnx", "a", state_inputs, 3, "Ascend310P3", "must_keep_origin_dtype")
    assert "--input_shape=obs:3,4;h:3,16;c:3,16;episode_start:3" in cmd


def test_reader_rejects_a_wrong_state_section_or_golden_sequences(exported, tmp_path):
    _, out = exported
    d = shutil.copytree(out, tmp_path / "bad")
    path = os.path.join(d, "manifest.json")
    m = json.load(open(path))
    m["io"]["state"]["inputs"][0]["shape"] = [None, 15]
    json.dump(m, open(path, "w"))
    with pytest.raises(deploy.ExportError, match="field 'io.state.inputs'.*16 units"):
        deploy.open_export(d, hashes=False)
    m["io"]["state"] = rec.state_io(16, None)
    m["golden"]["sequences"]["steps"] = 199
    json.dump(m, open(path, "w"))
    with pytest.raises(deploy.ExportError, match="'golden.sequences' 2 lanes x 199 steps must give 'golden.count' 400"):
        deploy.open_export(d, hashes=False)
    m["golden"]["sequences"]["steps"] = 200
    json.dump(m, open(path, "w"))
    with np.load(os.path.join(d, "golden.npz")) as z:
        arrays = {k: z[k] for k in z.files if k != "h"}
    np.savez(os.path.join(d, "golden.npz"), **arrays)
    with pytest.raises(deploy.ExportError, match="golden.npz: no 'h' array"):
        deploy.open_export(d, hashes=False)


def test_a_recurrent_trace_replays_through_the_references_own_loop(exported, tmp_path, capsys):
    """`msrl eval --record` of a recurrent export keeps each step's episode_start flags and next
    state; `msrl replay` carries the reference's own state from those flags and compares actions
    and states at every step: a state that drifted in the recording is found at its step."""
    from msrl_consistent.cli import main
    from msrl_consistent.export.replay import replay

    _, out = exported
    trace = str(tmp_path / "trace.npz")
    assert main(["eval", out, "--backend", "onnxruntime", "--episodes", "3", "--record", trace]) == 0
    with np.load(trace) as z:
        t = {k: z[k] for k in z.files}
    n = len(t["obs"])
    assert t["h"].shape == t["c"].shape == (n, 16) and t["episode_starts"].shape == (n,)
    assert t["episode_starts"].sum() == 3 and t["episode_starts"][0] == 1.0  # one flag per episode start
    for against in ("train", "mindspore"):
        r = replay(out, trace, against=against, write_report=False)
        assert r["passed"] and r["agreement"] == 1.0 and r["state"]["first_divergence_step"] is None, against
        assert r["state"]["max_state_error_scaled"] < 1e-5 and len(r["state_error_per_step"]) == n
    assert main(["replay", out, trace]) == 0
    assert "state: max error h" in capsys.readouterr().out
    drifted = dict(t, h=t["h"].copy())
    drifted["h"][7] += 0.01  # what a device whose state drifted would have recorded
    np.savez(str(tmp_path / "drifted.npz"), **drifted)
    r = replay(out, str(tmp_path / "drifted.npz"), write_report=False)
    assert not r["passed"] and r["state"]["first_divergence_step"] == 7 and r["agreement"] == 1.0
    bad = {k: v for k, v in t.items() if k != "c"}
    np.savez(str(tmp_path / "no_c.npz"), **bad)
    assert main(["replay", out, str(tmp_path / "no_c.npz")]) == 2
    assert "no 'c' array: the export is recurrent" in capsys.readouterr().err
    late = dict(t, episode_starts=t["episode_starts"].copy())
    late["episode_starts"][0] = 0.0
    np.savez(str(tmp_path / "late.npz"), **late)
    with pytest.raises(ConfigError, match="every env starts an episode there"):
        replay(out, str(tmp_path / "late.npz"), write_report=False)


def test_board_check_of_a_recurrent_bundle(exported, board_path, tmp_path):
    _, out = exported
    d = shutil.copytree(out, tmp_path / "board")
    r = board(board_path, str(d), "check", "--backend", "onnxruntime", "--latency-seconds", "0.1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "golden sequences: 2 lanes x 200 steps" in r.stdout and "PASS" in r.stdout
    code = ("from policy import load\nimport numpy as np\npi = load('.', backend='onnxruntime')\npi.reset()\n"
            "a, (h, c) = pi.step(np.zeros((3, 4), np.float32), (np.zeros((3, 16), np.float32),) * 2, np.ones(3))\n"
            "print(a.shape, h.shape, pi.act(np.zeros((2, 4), np.float32)).shape)\n")
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-S", "-c", code], cwd=str(d), capture_output=True, text=True,
                       env={"PYTHONPATH": board_path, "PATH": os.environ.get("PATH", "")}, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "(3,) (3, 16) (2,)", p.stdout + p.stderr



def test_lite_runs_the_recurrent_export_and_om_feeds_every_state_input(exported, lite_runtime, monkeypatch, tmp_path):
    """MindSpore Lite (the real runtime, CPU target) on the export converted by --format lite: the
    LSTM's constant-base Pow made computable for Lite's shape inference, every state input fed, the
    golden sequences through the deployed loop within the state tolerance. OM with a stand-in for
    its library (the ONNX graph behind the API): every input set at the fixed batch."""
    run_dir, out = exported
    lite_dir = str(tmp_path / "lite")
    m = exporter.export_run(run_dir, lite_dir, formats=["lite"], golden=400)
    assert m.export.conversion["lite"]["onnx_rewrites"]["pow_constant_base_computed"]  # the pow sigmoid's gates
    r = check_module.check(lite_dir, "lite", latency_seconds=0, write_report=False)
    assert r["passed"] and r["runner"]["file"] == "actor_lite.mindir", r
    assert r["golden"]["agreement"] == 1.0 and r["golden"]["max_state_error_scaled"] <= 1e-5

    fixed = str(tmp_path / "om")
    exporter.export_run(run_dir, fixed, formats=["mindir", "onnx"], batch=3, golden=30)
    infers = om_behind_onnx(monkeypatch, fixed)
    assert check_module.check(fixed, "om", latency_seconds=0, write_report=False)["passed"]
    assert [((3, 4), "float32"), ((3, 16), "float32"), ((3, 16), "float32"), ((3,), "float32")] in infers


def test_documented_board_loops_run_in_an_export_directory(exported, tmp_path):
    """docs/recurrent.md's two recurrent board loops (the bundle's act/reset, the raw runtime with the
    state fed back by hand), verbatim, in a copy of a recurrent export."""
    _, out = exported
    blocks = run_doc_python("docs/recurrent.md", "A recurrent policy on a board", shutil.copytree(out, tmp_path / "readme"))
    assert len(blocks) == 2 and "pi.reset()" in blocks[0] and '"episode_start": start' in blocks[1]


def test_precision_sweep_reports_the_state_drift_per_step(exported, tmp_path):
    """fp16's error accumulates in the state: the sweep gives the state's drift from the fp32 cell at
    every step of the golden sequences (fp32 itself: 0), and an fp16 export is judged by its drift
    report and returns, as every fp16 export."""
    run_dir, _ = exported
    out = str(tmp_path / "sweep")
    m = exporter.export_run(run_dir, out, golden=64, precision_sweep=True, sweep_episodes=1)
    rows = {r["emulation"]: r for r in json.load(open(os.path.join(out, "precision_sweep.json")))["rows"]}
    assert rows["fp32"]["state_max_abs_error"] == 0.0 and rows["fp32"]["golden_agreement"] == 1.0
    assert rows["fp16"]["state_max_abs_error"] > 1e-5 and len(rows["fp16"]["state_error_per_step"]) == 32
    assert set(rows["fp16"]["state_error_at_step"]) == {"1", "10"}
    assert "state_error_per_step" not in m.precision_sweep["rows"][2]  # the manifest keeps the summary
    assert "state drift, max (at step 1 / 10)" in open(os.path.join(out, "precision_sweep.md")).read()
    half = str(tmp_path / "fp16")
    exporter.export_run(run_dir, half, golden=64, precision="fp16")
    r = check_module.check(half, "mindspore", latency_seconds=0, write_report=False)
    assert r["passed"] and r["golden"]["max_state_error"] > 0


DOT_LSTM = ["total_timesteps=256", "env.id=MsrlTestDot-v0", "env.n_envs=4", "algo.n_steps=8", "algo.batch_size=16",
            "algo.n_epochs=2", "policy.lstm_hidden_size=16", "policy.net_arch=[]", "env.normalize_obs=false",
            "eval.freq=0", "eval.episodes=2"]


def test_image_lstm_trains_exports_and_verifies(tmp_path):
    """CnnLstm: raw uint8 frames -> the image encoder -> the LSTM; the export takes the frames and the
    state, MindIR bit-identical and ONNX Runtime within tolerance on the golden sequences."""
    import spaces_envs  # noqa: F401  (registers the test envs)

    run_dir, _, _ = train_run(tmp_path, CONFIG, DOT_LSTM, "run")
    out = str(tmp_path / "export")
    m = exporter.export_run(run_dir, out, formats=["mindir", "onnx"], golden=64)
    assert m.io["input"] == {"name": "obs", "shape": [None, 32 * 32 * 3], "dtype": "uint8"}
    assert m.io["state"]["hidden"] == 16 and m.export.onnx["batch"] == "dynamic"
    for backend in ("mindspore", "onnxruntime"):
        r = verify_export(out, backend=backend, episodes=2, write_report=False)
        assert r["passed"], (backend, r["criteria"])
    pi = deploy.load(out, backend="onnxruntime")
    pi.reset()
    frame = spaces_envs.DotToTarget().reset(seed=0)[0]
    assert pi.act(frame).shape == () and pi.act(frame).dtype == np.int32  # one raw (32, 32, 3) frame
