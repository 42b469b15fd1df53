"""`msrl eval --record`, `msrl replay` and the precision sweep on the spaces beyond Box/Discrete
(Discrete and Dict observations, MultiDiscrete / MultiBinary actions, uint8 images with frame
stacking), through the CLI as a user runs them. The policies are barely trained (one update):
what is checked is the plumbing, not what they learned."""
import json
import os

import numpy as np
import pytest
from test_spaces_train import DOT_CONFIG, MULTI_CONFIG, _train

from msrl_consistent.cli import main
from msrl_consistent.recording import read_trace
from msrl_consistent.runtime import load_policy

TINY = ("algo.n_steps=32", "algo.batch_size=64", "algo.n_epochs=1", "env.n_envs=2")
ENVS = {"frozenlake": None, "dict": "MsrlTestDict-v0", "multidiscrete": "MsrlTestMultiDiscrete-v0",
        "multibinary": "MsrlTestMultiBinary-v0", "dot": "MsrlTestDot-v0"}


@pytest.fixture(scope="module")
def space_export(tmp_path_factory, configs_dir):
    """space_export(name) -> (run_dir, export_dir): a one-update run exported (mindir, onnx) with its
    precision sweep; built once per module."""
    import spaces_envs  # noqa: F401  (registers the test envs)
    made = {}

    def get(name):
        if name not in made:
            tmp = tmp_path_factory.mktemp(name)
            if name == "frozenlake":
                cfg = os.path.join(configs_dir, "ppo", "FrozenLake-v1.yaml")
            else:
                cfg = tmp / "ppo.yaml"
                cfg.write_text(DOT_CONFIG.format(steps=64, k=2, skip=1) if name == "dot"
                               else MULTI_CONFIG.format(env_id=ENVS[name]))
            run = _train(tmp, str(cfg), 64, *TINY)
            out = str(tmp / "export")
            assert main(["export", run, "--out", out, "--format", "mindir,onnx", "--golden", "32",
                         "--precision-sweep", "--sweep-episodes", "1"]) == 0
            made[name] = run, out
        return made[name]
    return get


def _record(out, trace, capsys, backend="onnxruntime", episodes=2):
    assert main(["eval", out, "--backend", backend, "--episodes", str(episodes), "--record", trace]) == 0
    capsys.readouterr()
    return read_trace(trace)


def _replay(out, trace, against, capsys):
    rc = main(["replay", out, trace, "--against", against, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def _rewrite(src, dst, **arrays):
    """A copy of the trace ``src`` with some arrays replaced (what a hand-edited trace holds)."""
    t = read_trace(src)
    meta = t.pop("meta")
    t.update(arrays)
    np.savez(dst, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **t)
    return dst


def _sweep_rows(out):
    with open(os.path.join(out, "manifest.json")) as fh:
        return {r["emulation"]: r for r in json.load(fh)["precision_sweep"]["rows"]}


@pytest.mark.slow
def test_stacked_image_trace_is_uint8_and_replays(space_export, tmp_path, capsys):
    run, out = space_export("dot")
    trace = str(tmp_path / "dot.npz")
    t = _record(out, trace, capsys)
    # the model's input rows as the model saw them: 2 stacked uint8 frames, not a float32 copy
    assert t["obs"].dtype == np.uint8 and t["obs"].shape == (len(t["actions"]), 2 * 3072)
    starts = np.concatenate([[0], np.nonzero(t["dones"])[0][:-1] + 1])
    assert not t["obs"][starts, :3072].any()  # each episode starts with zeros, its first frame last
    assert np.array_equal(t["obs"][1, :3072], t["obs"][0, 3072:])  # oldest first
    for against in ("train", "mindspore", "onnxruntime"):
        rc, r = _replay(out, trace, against, capsys)
        assert rc == 0 and r["agreement"] == 1.0, r
        # the reference's own roll-outs on the recorded seeds stack frames as the recording did
        ri = r["return_impact"]
        assert ri["episodes"] == 2 and all(p["recorded"] == p["reference"] for p in ri["per_episode"])
    # a trace written before uint8 rows were kept (float32 pixel values) still replays
    old = _rewrite(trace, str(tmp_path / "old.npz"), obs=t["obs"].astype(np.float32))
    assert _replay(out, old, "train", capsys)[0] == 0
    assert _sweep_rows(out)["fp32"]["golden_agreement"] == 1.0


@pytest.mark.parametrize("name,nvec", [("multidiscrete", [3, 4, 2]), ("multibinary", [2, 2, 2, 2])])
@pytest.mark.slow
def test_multi_action_replay_and_sweep_per_dimension(name, nvec, space_export, tmp_path, capsys):
    from msrl_consistent.export.sweep import precision_sweep, sweep_markdown
    run, out = space_export(name)
    trace = str(tmp_path / "t.npz")
    t = _record(out, trace, capsys)
    dims = len(nvec)
    assert t["actions"].shape == (16, dims) and t["actions"].dtype == np.int32
    rc, r = _replay(out, trace, "mindspore", capsys)
    assert rc == 0 and r["agreement_per_dimension"] == [1.0] * dims and r["first_difference_dimensions"] == []
    # one dimension of one recorded action changed: one step differs, in that dimension only
    acts = t["actions"].copy()
    acts[5, 1] = (acts[5, 1] + 1) % nvec[1]
    rc, r = _replay(out, _rewrite(trace, str(tmp_path / "d.npz"), actions=acts), "train", capsys)
    assert rc == 1 and r["first_difference_step"] == 5 and r["first_difference_dimensions"] == [1]
    assert r["agreement"] == 1 - 1 / 16
    assert r["agreement_per_dimension"] == [1.0, 1 - 1 / 16] + [1.0] * (dims - 2)
    with open(os.path.join(out, "replay-train.md")) as fh:
        assert "agreement per action dimension: 0: 1.000000, 1: 0.937500" in fh.read()
    # the sweep counts an observation as agreeing when every dimension does, as verify does
    rows = _sweep_rows(out)
    assert rows["fp32"]["golden_agreement"] == 1.0 and rows["fp32"]["golden_agreement_per_dimension"] == [1.0] * dims
    with np.load(os.path.join(out, "golden.npz"), allow_pickle=False) as g:
        obs, golden = g["obs"], g["actions"].copy()
    golden[3, 0] = (golden[3, 0] + 1) % nvec[0]
    m = json.load(open(os.path.join(out, "manifest.json")))
    sweep = precision_sweep(run, m["source"]["checkpoint"], obs, golden, 1, episodes=0)
    fp32 = sweep["rows"][0]
    assert fp32["golden_agreement"] == 1 - 1 / 32
    assert fp32["golden_agreement_per_dimension"] == [1 - 1 / 32] + [1.0] * (dims - 1)
    assert "[0.9688, 1.0000" in sweep_markdown(sweep)


@pytest.mark.slow
def test_dict_observation_traces_replay(space_export, tmp_path, capsys):
    run, out = space_export("dict")
    trace = str(tmp_path / "eval.npz")
    t = _record(out, trace, capsys, backend="mindspore")
    assert t["obs"].shape == (16, 8) and t["obs"].dtype == np.float32  # packed rows, sorted keys
    for against in ("train", "onnxruntime"):
        rc, r = _replay(out, trace, against, capsys)
        assert rc == 0 and r["agreement"] == 1.0 and r["return_impact"]["delta"] == 0.0, r
    # a deployment calling act with dicts (one, then a batch) records the packed rows it ran
    api = str(tmp_path / "api.npz")
    pol = load_policy(out, backend="onnxruntime", record=api)
    pol.act({"goal": 2, "sign": np.array([1.0], np.float32), "pos": np.zeros((2, 3), np.float32)})
    pol.act({"goal": np.array([0, 1]), "sign": np.array([[-1.0], [1.0]], np.float32),
             "pos": np.ones((2, 2, 3), np.float32)})
    pol.recorder.close()
    t = read_trace(api)
    assert t["obs"].shape == (3, 8) and t["call_sizes"].tolist() == [1, 2] and t["obs"][0, 0] == 2.0
    rc, r = _replay(out, api, "train", capsys)
    assert rc == 0 and r["steps"] == 3 and r["agreement"] == 1.0
    # a packed row whose Discrete column is not an index of Discrete(3): exit 2, the file and the row named
    obs = t["obs"].copy()
    obs[1, 0] = 3.0
    bad = _rewrite(api, str(tmp_path / "bad.npz"), obs=obs)
    assert main(["replay", out, bad]) == 2
    err = capsys.readouterr().err
    assert "bad.npz: 'obs' rows 1..2 (one recorded call)" in err and "Discrete index, got 3.0" in err
    assert _sweep_rows(out)["fp16"]["golden_agreement"] is not None


@pytest.mark.slow
def test_discrete_observation_trace_replays(space_export, tmp_path, capsys):
    run, out = space_export("frozenlake")
    trace = str(tmp_path / "fl.npz")
    t = _record(out, trace, capsys)
    assert t["obs"].shape[1] == 1 and set(np.unique(t["obs"])) <= set(range(16))
    rc, r = _replay(out, trace, "train", capsys)
    assert rc == 0 and r["agreement"] == 1.0
    obs = t["obs"].copy()
    obs[0, 0] = 16.0
    assert main(["replay", out, _rewrite(trace, str(tmp_path / "bad.npz"), obs=obs)]) == 2
    err = capsys.readouterr().err
    assert "bad.npz: 'obs' row 0: expected Discrete(16) observations" in err and "got 16.0" in err
    assert set(_sweep_rows(out)) == {"fp32", "fp16-matmul", "fp16", "fp16-kept"}


@pytest.mark.parametrize("name,change,message", [
    ("multidiscrete", lambda n: {"actions": np.zeros((n, 2), np.int32)},
     "'actions' has shape ({n}, 2), but the export's MultiDiscrete([3, 4, 2]) action space gives ({n}, 3)"),
    ("multibinary", lambda n: {"actions": np.zeros((n, 4), np.float32)},
     "'actions' has dtype float32, expected integers (MultiBinary(4) actions)"),
    ("multibinary", lambda n: {"obs": np.zeros((n, 5), np.float32)},
     "'obs' has shape ({n}, 5), but the export's model input is (steps, 4) (float32 rows)"),
    ("multibinary", lambda n: {"call_sizes": np.ones(n - 1, np.int64)},
     "'call_sizes' is [1, 1, 1, 1, 1, 1, 1, 1], expected positive call sizes summing to the {n} recorded"),
    ("dot", lambda n: {"obs": np.zeros((n, 3072), np.uint8)},
     "'obs' has shape ({n}, 3072), but the export's model input is (steps, 6144) (uint8 pixel rows)"),
    ("dot", lambda n: {"obs": np.full((n, 6144), 300.0, np.float32)},
     "'obs' row 0: expected uint8 rows of shape (batch, 6144) (2 x Image(32, 32, 3) uint8 frames"),
], ids=["multidiscrete-action-width", "multibinary-float-actions", "obs-width", "call-sizes", "dot-unstacked-rows",
        "dot-pixel-range"])
def test_malformed_trace_is_a_usage_error(name, change, message, space_export, tmp_path, capsys):
    _, out = space_export(name)
    trace = str(tmp_path / "t.npz")
    n = len(_record(out, trace, capsys)["obs"])
    bad = _rewrite(trace, str(tmp_path / "bad.npz"), **change(n))
    assert main(["replay", out, bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith("msrl: error: ") and "Traceback" not in err
    assert f"bad.npz: {message.format(n=n)}" in err, err


def test_empty_trace_is_a_usage_error(space_export, tmp_path, capsys):
    _, out = space_export("multidiscrete")
    trace = str(tmp_path / "empty.npz")
    pol = load_policy(out, backend="mindspore", record=trace, record_limit=1)
    pol.act(np.zeros((2, 3), np.float32))  # past the limit: counted, not stored
    pol.recorder.close()
    assert main(["replay", out, trace]) == 2
    assert "empty.npz: no recorded observations (2 dropped past the record limit 1)" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(ENVS))
def test_every_space_runs_on_lite_and_passes_the_atc_preflight(name, space_export, lite_runtime, tmp_path):
    """Discrete and Dict observations, MultiDiscrete and MultiBinary actions, uint8 frames stacked:
    each export converts with Lite's converter and verifies on the real Lite (every dimension of
    every golden row identical), and the ATC pre-flight passes its ONNX graph."""
    from msrl_consistent.export.exporter import export_run
    from msrl_consistent.export.verify import verify_export

    run, _ = space_export(name)
    out = str(tmp_path / "lite")
    m = export_run(run, out, formats=["lite", "om"], preflight_only=True, golden=64)
    assert m.export.conversion["atc_preflight"]["passed"], m.export.conversion["atc_preflight"]["refused"]
    r = verify_export(out, backend="lite", episodes=1)
    assert r["passed"] and r["golden"]["agreement"] == 1.0, r["criteria"]
