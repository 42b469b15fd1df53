"""SAC and TD3 export: the tanh-scaled deterministic policy cell, bit-identical on MindSpore,
within 1e-6 on ONNX Runtime and MindSpore Lite (and the float64 reference's verdict); an export without
the action scaling is caught."""
import json

import numpy as np
import pytest
from helpers import export_without_head, train_run

from msrl_consistent.cli import main
from msrl_consistent.export.exact import describe, float64_action_reference
from msrl_consistent.export.exporter import export_run
from msrl_consistent.export.verify import verify_export

SHORT = ["total_timesteps=400", "algo.learning_starts=200", "eval.freq=0", "eval.episodes=1",
         "policy.net_arch=[64, 64]", "algo.batch_size=64", "log.tensorboard=false"]


@pytest.fixture(scope="module", params=["sac", "td3"])
def offpolicy_run(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    run, _, _ = train_run(root, f"{request.param}/Pendulum-v1.yaml", SHORT, "run")
    return request.param, run


@pytest.mark.slow
def test_offpolicy_export_verifies(offpolicy_run, lite_runtime, tmp_path):
    algo, run = offpolicy_run
    out = str(tmp_path / "e")
    m = export_run(run, out, formats=["mindir", "onnx"], golden=128)
    assert m.algorithm == algo and "tanh" in m.io["post_processing"]
    r = verify_export(out, backend="mindspore", episodes=2)
    assert r["passed"] and r["golden"]["bit_identical"] and r["rollouts"]["identical_episodes"] == 2
    r2 = verify_export(out, backend="onnxruntime", episodes=1)
    assert r2["passed"] and r2["golden"]["max_abs_error"] <= 1e-6
    # both float32 runs against the graph in float64: the training cell's squashed action within 1e-6
    # of exact arithmetic (the pow tanh), the backend's error called rounding; a perturbed one not
    ref = r2["golden"]["float64_reference"]
    assert ref["rounding"] and ref["training_cell"]["max_abs_error"] < 1e-6, ref
    with np.load(f"{out}/golden.npz") as g:
        off = float64_action_reference(out, g["obs"], g["actions"], g["actions"] + np.float32(1e-4))
    assert not off["rounding"] and "not float32 rounding alone" in describe(off)
    lite_out = str(tmp_path / "lite")  # MindSpore Lite (the real runtime) on the model its converter made
    m = export_run(run, lite_out, formats=["lite", "om"], preflight_only=True, golden=128)
    assert m.export.conversion["atc_preflight"]["passed"] and "actor.om" not in m.files
    r3 = verify_export(lite_out, backend="lite", episodes=1)
    assert r3["passed"] and r3["golden"]["max_abs_error"] <= 1e-6
    with np.load(f"{out}/golden.npz") as g:
        assert g["actions"].min() >= -2.0 and g["actions"].max() <= 2.0


def test_offpolicy_export_without_scaling_fails(offpolicy_run, tmp_path, capsys, monkeypatch):
    # the forgotten-post-processing bug: the raw pre-tanh network output exported as the action
    algo, run = offpolicy_run
    out = str(tmp_path / "raw")
    export_without_head(monkeypatch, run, out, golden=128)
    rc = main(["verify", out, "--episodes", "1", "--json"])
    r = json.loads(capsys.readouterr().out)
    assert rc == 1 and not r["passed"]
    assert r["golden"]["max_abs_error"] > 1e-3 and r["golden"]["first_mismatch"] is not None
