"""Several sensors end to end: MultiSensorReach-v0 (a camera key beside a position key) trained
with the shipped config, exported with one graph input per key kind, and proven on MindIR, ONNX
Runtime, the raw runtime with named inputs, the bundle on a board, and recurrent."""
import json
import os
import shutil

import numpy as np
import pytest
from helpers import board, om_behind_onnx, run_doc_python

from msrl_consistent.cli import main
from msrl_consistent.deploy import Export, ExportError
from msrl_consistent.envs.sensors import MultiSensorReach
from msrl_consistent.export.verify import verify_export
from msrl_consistent.runtime import load_policy

INPUTS = [{"name": "obs_camera", "keys": ["camera"], "shape": [None, 16, 16, 3], "dtype": "uint8"},
          {"name": "obs", "keys": ["position"], "shape": [None, 2], "dtype": "float32"}]


@pytest.fixture(scope="module")
def sensor_export(tmp_path_factory, configs_dir):
    d = tmp_path_factory.mktemp("sensors")
    run, out = str(d / "run"), str(d / "export")
    config = os.path.join(configs_dir, "ppo", "MultiSensorReach-v0.yaml")
    # half the shipped budget: the policy is at the task's optimum from ~16k steps (docs/spaces.md)
    assert main(["train", config, "--run-dir", run, "--total-timesteps", "24576", "--quiet",
                 "--set", "eval.episodes=50"]) == 0
    assert main(["export", run, "--out", out, "--format", "mindir,onnx", "--golden", "256"]) == 0
    return run, out


def _obs(n, seed=0):
    frames, positions = [], []
    for i in range(n):
        o, _ = MultiSensorReach().reset(seed=seed + i)
        frames.append(o["camera"])
        positions.append(o["position"])
    return {"camera": np.stack(frames), "position": np.stack(positions)}


def test_the_multi_input_policy_learns_exports_and_verifies(sensor_export):
    run, out = sensor_export
    with open(os.path.join(run, "summary.json")) as fh:
        # optimum 1.27 on average; either sensor alone stays below 0.5 (docs/benchmarks.md)
        assert json.load(fh)["final_eval"]["mean_return"] >= 1.15
    with open(os.path.join(out, "manifest.json")) as fh:
        m = json.load(fh)
    assert m["io"]["inputs"] == INPUTS and "input" not in m["io"]
    assert m["spaces"]["observation"]["spaces"]["camera"] == {"type": "Image", "shape": [16, 16, 3],
                                                              "layout": "HWC", "dtype": "uint8"}
    assert m["export"]["onnx"]["batch"] == "dynamic" and m["export"]["onnx"]["inputs"] == ["obs_camera", "obs"]
    for backend in ("mindspore", "onnxruntime"):
        rep = verify_export(out, backend=backend, episodes=5, write_report=False)
        assert rep["passed"], (backend, rep["criteria"])
        assert rep["golden"]["bit_identical"] and rep["golden"]["agreement"] == 1.0, backend
        assert rep["rollouts"]["identical_episodes"] == 5, backend


def test_the_deployed_policy_takes_dict_observations_and_the_raw_graph_named_inputs(sensor_export):
    import onnxruntime as ort
    run, out = sensor_export
    train = load_policy(run)
    obs = _obs(6)
    want = train.act(obs)
    one = {k: v[0] for k, v in obs.items()}
    session = ort.InferenceSession(os.path.join(out, "actor.onnx"), providers=["CPUExecutionProvider"])
    raw = session.run(None, {"obs_camera": obs["camera"], "obs": obs["position"]})[0]
    assert np.array_equal(raw, want)
    for backend in ("mindspore", "onnxruntime"):
        pi = load_policy(out, backend=backend)
        assert np.array_equal(pi.act(obs), want) and pi.act(one) == want[0], backend
        with pytest.raises(ValueError, match=r"key 'camera' of Dict\(camera: Image\(16, 16, 3\) uint8, "
                                             r"position: Box\(2,\)\): uint8 pixels"):
            pi.act(dict(one, camera=one["camera"] + 0.5))
        with pytest.raises(ValueError, match=r"missing keys \['position'\]"):
            pi.act({"camera": one["camera"]})


def test_a_wrong_inputs_section_is_refused_naming_the_field(sensor_export):
    _, out = sensor_export
    with open(os.path.join(out, "manifest.json")) as fh:
        m = json.load(fh)
    for change in (lambda io: io["inputs"].reverse(), lambda io: io["inputs"][0].update(dtype="float32"),
                   lambda io: io.update(input=io.pop("inputs")[1])):
        bad = json.loads(json.dumps(m))
        change(bad["io"])
        with pytest.raises(ExportError, match="field 'io.inputs'|missing field 'io.inputs'"):
            Export(out, bad)


def test_the_bundle_checks_a_multi_input_export_on_a_board(sensor_export, board_path):
    _, out = sensor_export
    r = board(board_path, out, "check", "--backend", "onnxruntime", "--latency-seconds", "0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "golden set discrete actions identical" in r.stdout


@pytest.mark.slow
def test_lite_runs_the_multi_input_export_and_the_atc_preflight_passes_it(sensor_export, lite_runtime, board_path,
                                                                        tmp_path):
    """The camera's uint8 frames and the position row as Lite's two inputs (the real runtime, on the
    model Lite's converter made), in msrl verify and on a board; the ATC pre-flight passes the graph."""
    from msrl_consistent.export.exporter import export_run
    from msrl_consistent.export.verify import verify_export

    run, _ = sensor_export
    out = str(tmp_path / "lite")
    m = export_run(run, out, formats=["lite", "om"], preflight_only=True, golden=256)
    assert m.export.conversion["atc_preflight"]["passed"]
    r = verify_export(out, backend="lite", episodes=2)
    assert r["passed"] and r["golden"]["agreement"] == 1.0, r["criteria"]
    b = board(board_path, out, "check", "--backend", "lite", "--latency-seconds", "0")
    assert b.returncode == 0 and "golden set discrete actions identical" in b.stdout, b.stdout + b.stderr


def test_the_om_runner_feeds_each_sensor_input(sensor_export, monkeypatch, tmp_path):
    """The OM runner with a stand-in for ais_bench (the ONNX graph behind its API, at the golden
    batch 1): the frames and the row reach ``infer`` as separate inputs, uint8 and float32, and the
    golden set passes."""
    from msrl_consistent import deploy

    _, out = sensor_export
    d = str(shutil.copytree(out, tmp_path / "om"))
    infers = om_behind_onnx(monkeypatch, d)
    assert deploy.check(d, "om", latency_seconds=0, write_report=False)["passed"]
    assert [((1, 16, 16, 3), "uint8"), ((1, 2), "float32")] in infers


def test_replay_and_the_precision_sweep_take_multi_input_exports(sensor_export, tmp_path, capsys):
    from msrl_consistent.export import exporter

    run, out = sensor_export
    trace = str(tmp_path / "trace.npz")
    assert main(["eval", out, "--backend", "onnxruntime", "--episodes", "3", "--record", trace]) == 0
    for against in ("train", "mindspore"):
        assert main(["replay", out, trace, "--against", against]) == 0
        assert "agreement 1.000000" in capsys.readouterr().out
    sweep = str(tmp_path / "sweep")
    exporter.export_run(run, sweep, golden=64, precision_sweep=True, sweep_episodes=3)
    rows = {r["emulation"]: r for r in json.load(open(os.path.join(sweep, "precision_sweep.json")))["rows"]}
    assert rows["fp32"]["golden_agreement"] == 1.0 and set(rows) >= {"fp16", "fp16-matmul"}


def test_documented_multi_sensor_loops_run_in_an_export_directory(sensor_export, tmp_path):
    """docs/spaces.md's two multi-sensor board loops (the bundle's act on a dict, the raw runtime fed
    the named inputs), verbatim, in a copy of the export."""
    _, out = sensor_export
    blocks = run_doc_python("docs/spaces.md", "Several sensors on a board", shutil.copytree(out, tmp_path / "readme"))
    assert len(blocks) == 2 and "pi.act(obs)" in blocks[0] and '"obs_camera"' in blocks[1]


@pytest.mark.slow
def test_a_recurrent_multi_input_policy_exports_its_state_beside_the_sensors(tmp_path, configs_dir):
    run, out = str(tmp_path / "run"), str(tmp_path / "export")
    config = os.path.join(configs_dir, "ppo", "MultiSensorReach-v0.yaml")
    assert main(["train", config, "--run-dir", run, "--total-timesteps", "512", "--quiet", "--set", "eval.episodes=1",
                 "--set", "policy.recurrent=true", "--set", "policy.lstm_hidden_size=16"]) == 0
    assert main(["export", run, "--out", out, "--format", "mindir,onnx", "--golden", "64"]) == 0
    with open(os.path.join(out, "manifest.json")) as fh:
        io = json.load(fh)["io"]
    assert io["inputs"] == INPUTS and [i["name"] for i in io["state"]["inputs"]] == ["h", "c", "episode_start"]
    for backend in ("mindspore", "onnxruntime"):
        rep = verify_export(out, backend=backend, episodes=2, write_report=False)
        assert rep["passed"], (backend, rep["criteria"])
        assert rep["golden"]["sequences"]["lanes"] == 2 and rep["golden"]["first_divergence"] is None, backend
    assert verify_export(out, backend="mindspore", episodes=1, write_report=False)["golden"]["max_state_error"] == 0.0
    pi, obs = load_policy(out, backend="onnxruntime"), _obs(3)
    pi.reset()
    zeros = np.zeros((3, 16), np.float32)
    action, (h, c) = pi.step(obs, (zeros, zeros), np.ones(3, np.float32))  # the caller owns the state
    assert np.array_equal(action, pi.act(obs)) and h.shape == (3, 16)
    one, state = pi.step({k: v[0] for k, v in obs.items()}, (zeros[:1], zeros[:1]), np.ones(1, np.float32))
    assert one == action[0] and state[0].shape == (1, 16)
