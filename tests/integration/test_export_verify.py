"""msrl export / verify / eval on exports: bit-identical MindIR, ONNX within 1e-5, failures caught."""
import json
import os
import stat

import numpy as np
import pytest
from helpers import export_without_head

from msrl_consistent.cli import main
from msrl_consistent.config import ConfigError
from msrl_consistent.export.exporter import export_run
from msrl_consistent.export.verify import verify_export
from msrl_consistent.manifest import IntegrityError, read_manifest
from msrl_consistent.runtime import BackendUnavailable, load_policy


@pytest.fixture(scope="module")
def cartpole_export(cartpole_run, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("exp") / "cartpole")
    assert main(["export", cartpole_run, "--out", out, "--format", "mindir,onnx", "--golden", "256"]) == 0
    return out


@pytest.fixture(scope="module")
def pendulum_export(pendulum_run, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("exp") / "pendulum")
    export_run(pendulum_run, out, formats=["mindir", "onnx"], golden=256)
    return out


def test_manifest_contents(cartpole_export, cartpole_run):
    m = read_manifest(cartpole_export)
    assert set(m.files) == {"actor.mindir", "actor.onnx", "golden.npz", "policy.py", "msrl_deploy.zip"}
    assert m.algorithm == "ppo" and m.env_id == "CartPole-v1"
    assert m.source.run_dir == os.path.abspath(cartpole_run)
    assert len(m.source.checkpoint_sha256) == 64
    assert m.spaces["action"] == {"type": "Discrete", "n": 2, "dtype": "int32"}
    assert m.io["input"]["shape"] == [None, 4] and m.io["output"]["dtype"] == "int32"
    assert m.export.onnx["output_elem_type"] == "INT32"
    for k in ("mindspore", "numpy", "gymnasium", "python", "msrl_consistent"):
        assert k in m.versions
    with np.load(os.path.join(cartpole_export, "golden.npz"), allow_pickle=False) as g:
        assert g["obs"].shape == (256, 4) and g["actions"].shape == (256,) and g["actions"].dtype == np.int32


def test_verify_mindspore_bit_identical(cartpole_export, capsys):
    rc = main(["verify", cartpole_export, "--episodes", "3", "--json"])
    r = json.loads(capsys.readouterr().out)
    assert rc == 0 and r["passed"]
    assert r["golden"]["agreement"] == 1.0 and r["golden"]["bit_identical"]
    assert r["rollouts"]["identical_episodes"] == 3
    assert os.path.isfile(os.path.join(cartpole_export, "report-verify-mindspore.md"))


def test_verify_onnxruntime(cartpole_export):
    r = verify_export(cartpole_export, backend="onnxruntime", episodes=2)
    assert r["passed"] and r["golden"]["agreement"] == 1.0
    assert r["rollouts"]["same_state_action_disagreements"] == 0


def test_continuous_export_bit_identical_and_onnx_close(pendulum_export, pendulum_run):
    r = verify_export(pendulum_export, backend="mindspore", episodes=2)
    assert r["passed"] and r["golden"]["bit_identical"] and r["golden"]["max_abs_error"] == 0.0
    assert r["rollouts"]["identical_episodes"] == 2
    r2 = verify_export(pendulum_export, backend="onnxruntime", episodes=1)
    assert r2["passed"] and r2["golden"]["max_abs_error"] <= 1e-5
    # actions respect the Box bounds, normalization lives inside the graph
    with np.load(os.path.join(pendulum_export, "golden.npz")) as g:
        assert g["actions"].min() >= -2.0 and g["actions"].max() <= 2.0
    m = read_manifest(pendulum_export)
    assert m.env["normalize_obs"] is True


def test_verify_says_what_passed_and_keeps_one_report_per_backend_and_checker(pendulum_export, capsys):
    import subprocess
    import sys
    # a continuous policy on ONNX Runtime: the rollouts pass within the tolerance, and the line says so
    assert main(["verify", pendulum_export, "--backend", "onnxruntime", "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "rollouts: 2/2 within atol 1e-05, " in out and "bit-identical step for step" in out, out
    assert main(["verify", pendulum_export, "--backend", "mindspore", "--episodes", "1"]) == 0
    assert "rollouts: 1/1 identical step for step" in capsys.readouterr().out
    proc = subprocess.run([sys.executable, "policy.py", "check", "--backend", "onnxruntime", "--latency-seconds", "0"],
                          cwd=pendulum_export, capture_output=True, text=True, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # each result stays in its own file, with its backend: nothing was overwritten
    reports = {}
    for name in ("report-verify-onnxruntime.json", "report-verify-mindspore.json", "report-check-onnxruntime.json"):
        with open(os.path.join(pendulum_export, name)) as fh:
            reports[name] = json.load(fh)
    assert [r["backend"] for r in reports.values()] == ["onnxruntime", "mindspore", "onnxruntime"]
    assert reports["report-verify-onnxruntime.json"]["rollouts"]["episodes"] == 2
    assert reports["report-verify-mindspore.json"]["rollouts"]["episodes"] == 1
    for backend in ("onnxruntime", "mindspore"):
        md = open(os.path.join(pendulum_export, f"report-verify-{backend}.md")).read()
        assert f"backend: {backend}," in md
    assert not os.path.exists(os.path.join(pendulum_export, "report.json"))


@pytest.mark.slow
def test_gsde_policy_exports_its_mean_and_verifies(tmp_path):
    # gSDE changes exploration only: the exported policy is the deterministic mean (clipped), the
    # same graph as without gSDE, bit-identical on MindSpore and within 1e-5 on ONNX Runtime
    from helpers import train_run

    run, _, algo = train_run(tmp_path, "ppo/Pendulum-v1-gsde.yaml",
                             ["total_timesteps=1024", "algo.n_steps=128", "eval.freq=0", "eval.episodes=1"], "gsde")
    assert tuple(algo.agent.log_std.shape) == (64, 1)
    out = str(tmp_path / "export")
    export_run(run, out, formats=["mindir", "onnx"], golden=256)
    r = verify_export(out, backend="mindspore", episodes=2)
    assert r["passed"] and r["golden"]["bit_identical"] and r["rollouts"]["identical_episodes"] == 2
    r2 = verify_export(out, backend="onnxruntime", episodes=1)
    assert r2["passed"] and r2["golden"]["max_abs_error"] <= 1e-5
    with np.load(os.path.join(out, "golden.npz")) as g:
        # the mean of the trained agent (another batch blocking than the golden set's: 1 ulp apart)
        np.testing.assert_allclose(g["actions"], algo.act_deterministic(g["obs"]), rtol=0, atol=1e-6)
    assert read_manifest(out).source.config["algo"]["use_sde"] is True


def test_opening_an_export_reads_its_manifest_once(cartpole_export, monkeypatch):
    # one reading validates the directory, builds the typed manifest and serves the guard's fallback too
    import builtins
    real_open, opened = builtins.open, []

    def counting_open(file, *args, **kwargs):
        if os.path.basename(str(file)) == "manifest.json":
            opened.append(file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    policy = load_policy(cartpole_export, backend="onnxruntime", guard=True)
    assert policy.guard.fallback.backend == "mindspore" and policy.manifest.algorithm == "ppo"
    assert len(opened) == 1, opened


def test_raw_output_export_is_a_mismatch(cartpole_run, tmp_path, capsys, monkeypatch):
    # exported without its post-processing: logits instead of the argmax index
    out = str(tmp_path / "raw")
    export_without_head(monkeypatch, cartpole_run, out, golden=128)
    rc = main(["verify", out, "--episodes", "1", "--json"])
    r = json.loads(capsys.readouterr().out)
    assert rc == 1 and not r["passed"]
    assert "not an environment action" in r["rollouts_skipped"]
    assert "float32 [128, 2]" in r["golden"]["output_mismatch"]


def test_flipped_byte_is_integrity_error(cartpole_run, tmp_path, capsys):
    out = str(tmp_path / "e")
    export_run(cartpole_run, out, golden=64)
    path = os.path.join(out, "actor.mindir")
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    rc = main(["verify", out])
    err = capsys.readouterr().err
    assert rc == 2 and "actor.mindir" in err and "sha256" in err


def test_manifest_schema_checked(cartpole_export, tmp_path):
    import shutil
    d = tmp_path / "m"
    shutil.copytree(cartpole_export, d)
    m = json.loads((d / "manifest.json").read_text())
    m["schema_version"] = 99
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(IntegrityError, match="unknown schema_version 99"):
        read_manifest(str(d))
    del m["files"]
    m["schema_version"] = 1
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(IntegrityError, match="missing field 'files'"):
        read_manifest(str(d))


def test_fp16_export_reports_drift(cartpole_run, tmp_path):
    out = str(tmp_path / "fp16")
    m = export_run(cartpole_run, out, precision="fp16", golden=128)
    assert m.export.precision == "fp16"
    r = verify_export(out, episodes=2)
    names = [c["name"] for c in r["criteria"]]
    assert any("return drop" in n for n in names)
    assert "agreement" in r["golden"]


def test_fp16_keeps_a_normalization_float16_cannot_hold(pendulum_run, tmp_path):
    """A normalizer whose variance float16 cannot hold (a dimension that never moved: var 1e-9,
    and 1e-9 + 1e-8 is 0 in float16) makes the whole-cell fp16 emulation divide by zero; the fp16
    export keeps the normalization (and the action head) in float32 and acts like the fp32 cell."""
    import shutil

    from msrl_consistent.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
    from msrl_consistent.export.sweep import emulated_policy
    run = str(tmp_path / "run")
    shutil.copytree(pendulum_run, run)
    path = latest_checkpoint(run)
    tensors, meta = load_checkpoint(path)
    tensors["agent/normalizer.var"][2] = 1e-9  # the angular velocity, as if it never moved
    tensors["agent/normalizer.mean"][2] = 0.0
    save_checkpoint(path, tensors, meta)
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 3)).astype(np.float32)
    obs[:, 2] = 0.0
    fp32 = emulated_policy(run, path, "fp32").act(obs)
    whole = emulated_policy(run, path, "fp16").act(obs)
    kept = emulated_policy(run, path, "fp16-kept").act(obs)
    err_whole, err_kept = np.abs(whole - fp32).max(), np.abs(kept - fp32).max()
    assert err_whole > 20 * err_kept, (err_whole, err_kept)  # 0 / 0 in float16 where the row has 0
    out = str(tmp_path / "fp16")
    m = export_run(run, out, precision="fp16", golden=64, formats=["mindir", "onnx"])
    assert m.export.conversion["fp16"] == {"float32_parts": ["normalizer", "head"]}
    exported = load_policy(out, backend="onnxruntime").act(obs)
    assert np.abs(exported - fp32).max() * 20 < err_whole


def test_fixed_batch_export(cartpole_run, tmp_path):
    out = str(tmp_path / "b8")
    m = export_run(cartpole_run, out, formats=["mindir", "onnx"], batch=8, golden=100)
    assert m.io["input"]["shape"] == [8, 4] and m.golden.batch == 8
    for backend in ("mindspore", "onnxruntime"):
        r = verify_export(out, backend=backend, episodes=1)
        assert r["passed"], backend
        p = load_policy(out, backend=backend)
        assert p.act(np.zeros((3, 4), np.float32)).shape == (3,)  # padded to 8 inside


def test_export_refuses_existing_dir(cartpole_run, cartpole_export):
    before = open(os.path.join(cartpole_export, "manifest.json")).read()
    with pytest.raises(ConfigError, match="exists and is not empty"):
        export_run(cartpole_run, cartpole_export)
    assert open(os.path.join(cartpole_export, "manifest.json")).read() == before


def test_runtime_input_validation(cartpole_export):
    p = load_policy(cartpole_export, backend="mindspore")
    assert p.act(np.zeros(4, np.float32)).shape == ()
    assert p.act(np.zeros((5, 4), np.float64)).shape == (5,)
    with pytest.raises(ValueError, match=r"shape \(4,\) or \(batch, 4\), got shape \(3,\)"):
        p.act(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="got dtype int64"):
        p.act(np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="finite"):
        p.act(np.array([0, np.nan, 0, 0], np.float32))
    with pytest.raises(ValueError, match="got shape"):
        p.act(np.zeros((2, 2, 4), np.float32))


def test_lite_backend_missing_is_clear(cartpole_export, monkeypatch, tmp_path):
    monkeypatch.setenv("MSRL_LITE_HOME", str(tmp_path / "nothing-installed"))
    with pytest.raises(BackendUnavailable, match="MindSpore Lite, which is not installed.*msrl lite install"):
        load_policy(cartpole_export, backend="lite")


def test_eval_export_reports_latency(cartpole_export, capsys):
    assert main(["eval", cartpole_export, "--backend", "onnxruntime", "--episodes", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "onnxruntime" and out["latency_us"]["p50"] > 0 and out["latency_us"]["p99"] >= out["latency_us"]["p50"]
    assert main(["eval", cartpole_export, "--backend", "mindspore", "--episodes", "2", "--json"]) == 0
    out2 = json.loads(capsys.readouterr().out)
    assert out2["returns"] == out["returns"]  # same seeds, same discrete actions
