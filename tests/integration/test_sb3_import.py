"""``msrl import``: the committed Stable-Baselines3 fixtures (tests/fixtures/sb3, made by its
make_fixtures.py) become msrl run directories whose policy cell acts as SB3's predict did (integer
actions all identical, continuous within 1e-5), whose exports verify (MindIR bitwise against the
imported cell, ONNX Runtime and Lite within 1e-5) and act as SB3 did on the board runtimes, and
from which ``msrl train --init-from`` continues. Refusals: code-running pickles and unsupported
policies give one ``msrl: error:`` line, exit 2, and no run directory. None of this needs torch or
SB3; the last test, where SB3 is installed, lets it make a model and predict itself."""
import base64
import io
import json
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest
import spaces_envs  # noqa: F401  (registers the MultiDiscrete, MultiBinary and 40x40 image envs)
from helpers import ROOT

from msrl_consistent.cli import main

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "sb3")
ZOO = os.path.join(FIXTURES, "logs", "ppo", "Pendulum-v1_1")
CASES = {
    # name: (model, env id, predictions)
    "ppo-discrete": ("ppo_cartpole.zip", "CartPole-v1", "ppo_cartpole_predict.npz"),
    "a2c-multidiscrete-relu": ("a2c_multidiscrete.zip", "MsrlTestMultiDiscrete-v0", "a2c_multidiscrete_predict.npz"),
    "ppo-multibinary-elu": ("ppo_multibinary.zip", "MsrlTestMultiBinary-v0", "ppo_multibinary_predict.npz"),
    "dqn": ("dqn_cartpole.zip", "CartPole-v1", "dqn_cartpole_predict.npz"),
    "sac": ("sac_pendulum.zip", "Pendulum-v1", "sac_pendulum_predict.npz"),
    "td3-pi-qf": ("td3_pendulum.zip", "Pendulum-v1", "td3_pendulum_predict.npz"),
    "ppo-cnn": ("ppo_cnn_dot40.zip", "MsrlTestDot40-v0", "ppo_cnn_dot40_predict.npz"),
    "ppo-gsde-vecnormalize-zoo": (ZOO, None, "ppo_pendulum_sde_predict.npz"),
}


def run_import(tmp_path, name, *extra):
    model, env, predict = CASES[name]
    out = str(tmp_path / name)
    argv = ["import", os.path.join(FIXTURES, model), "--out", out, "--check", os.path.join(FIXTURES, predict)]
    rc = main(argv + (["--env", env] if env else []) + list(extra))
    return rc, out


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("sb3")
    out = {}
    for name in CASES:
        rc, run = run_import(root, name)
        assert rc == 0, name
        out[name] = run
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_imported_cell_acts_as_sb3_predicted(imported, name):
    with open(os.path.join(imported[name], "summary.json")) as fh:
        check = json.load(fh)["check"]
    assert check["passed"] and check["observations"] == 200
    if check["kind"] == "discrete":
        assert check["identical_fraction"] == 1.0 and check["mismatched_rows"] == 0
    else:
        assert check["max_abs_diff"] <= 1e-5


def test_zoo_vecnormalize_statistics_are_in_the_cell_with_the_epsilon_carried(imported):
    from msrl_consistent.checkpoint import latest_checkpoint, load_checkpoint
    from msrl_consistent.config import load_config
    from msrl_consistent.sb3.unpickle import read_vecnormalize

    run = imported["ppo-gsde-vecnormalize-zoo"]
    cfg = load_config(os.path.join(run, "config.yaml"))
    assert cfg.env.normalize_obs and cfg.env.normalize_obs_clip == 5.0 and cfg.algo.use_sde
    tensors, _ = load_checkpoint(latest_checkpoint(run))
    with open(os.path.join(ZOO, "Pendulum-v1", "vecnormalize.pkl"), "rb") as fh:
        rms = read_vecnormalize(fh.read(), "vecnormalize.pkl")["obs_rms"]
    np.testing.assert_array_equal(tensors["agent/normalizer.mean"], rms["mean"].astype(np.float32))
    np.testing.assert_array_equal(tensors["agent/normalizer.var"], (rms["var"] + 1e-6 - 1e-8).astype(np.float32))


def test_a_mismatch_with_the_predictions_exits_1_and_says_so(tmp_path, capsys):
    with np.load(os.path.join(FIXTURES, "ppo_cartpole_predict.npz")) as z:
        obs, actions = z["obs"], z["actions"]
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, obs=obs, actions=1 - actions)
    rc = main(["import", os.path.join(FIXTURES, "ppo_cartpole.zip"), "--env", "CartPole-v1", "--out",
               str(tmp_path / "run"), "--check", str(wrong)])
    assert rc == 1 and "MISMATCH" in capsys.readouterr().out
    with open(tmp_path / "run" / "summary.json") as fh:
        assert json.load(fh)["check"]["identical_fraction"] == 0.0


def _lite_installed():
    """`msrl lite status`'s answer (CI installs Lite; a developer machine may not have it)."""
    from msrl_consistent.deploy import lite
    return lite.available()


@pytest.mark.parametrize("name", ["ppo-gsde-vecnormalize-zoo", "a2c-multidiscrete-relu", "ppo-cnn", "td3-pi-qf"])
def test_exports_verify_and_act_as_sb3_on_the_deploy_runtimes(imported, tmp_path, name):
    from msrl_consistent.runtime import load_policy

    lite = _lite_installed()
    out = str(tmp_path / "export")
    assert main(["export", imported[name], "--out", out, "--format", "mindir,onnx" + (",lite" if lite else "")]) == 0
    for backend in ["mindspore", "onnxruntime"] + (["lite"] if lite else []):
        assert main(["verify", out, "--backend", backend, "--episodes", "1"]) == 0, backend
    with np.load(os.path.join(FIXTURES, CASES[name][2])) as z:
        obs, actions = z["obs"], z["actions"]
    for backend in ["onnxruntime"] + (["lite"] if lite else []):
        got = load_policy(out, backend=backend).act(obs.reshape(len(obs), -1).astype(
            np.uint8 if name == "ppo-cnn" else np.float32))
        if np.issubdtype(actions.dtype, np.integer):
            assert np.array_equal(got.reshape(actions.shape), actions), backend
        else:
            assert np.max(np.abs(got.reshape(actions.shape) - actions)) <= 1e-5, backend


@pytest.mark.slow
def test_init_from_continues_training_from_the_imported_parameters(imported, tmp_path, capsys):
    from msrl_consistent.checkpoint import latest_checkpoint, load_checkpoint

    src = imported["ppo-discrete"]
    run = str(tmp_path / "more")
    rc = main(["train", os.path.join(src, "config.yaml"), "--init-from", src, "--run-dir", run, "--quiet",
               "--total-timesteps", "128", "--set", "algo.learning_rate=1e-9", "--set", "eval.freq=0",
               "--set", "eval.episodes=1", "--set", "env.n_envs=1"])
    assert rc == 0
    before, _ = load_checkpoint(latest_checkpoint(src))
    after, meta = load_checkpoint(latest_checkpoint(run))
    assert meta["counters"]["num_timesteps"] == 128
    w = "agent/actor.layers.0.weight"
    assert 0 < np.max(np.abs(after[w] - before[w])) < 1e-6  # trained a little, from the imported weights
    bad = str(tmp_path / "bad")
    rc = main(["train", os.path.join(src, "config.yaml"), "--init-from", src, "--run-dir", bad,
               "--set", "policy.net_arch=[8]"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "policy.net_arch: [16, 16] in the run, [8] in the config" in err[0]
    assert not os.path.exists(bad)


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _rewrite(src, dst, **entries):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            zout.writestr(item.filename, entries.get(item.filename, zin.read(item.filename)))


def _data_with(src, **fields):
    with zipfile.ZipFile(src) as z:
        data = json.loads(z.read("data"))
    for key, value in fields.items():
        data[key] = value
    return json.dumps(data).encode()


def _blob(payload):
    return {":type:": "<class 'dict'>", ":serialized:": base64.b64encode(payload).decode()}


def _planted(tmp_path, where):
    """A copy of the CartPole fixture with a code-running pickle in ``where``; -> (model, extra args)."""
    marker = str(tmp_path / "ran")
    src, model = os.path.join(FIXTURES, "ppo_cartpole.zip"), str(tmp_path / "model.zip")
    evil = pickle.dumps(RunsCode(marker), protocol=2)
    if where == "policy.pth":
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("archive/data.pkl", evil)
        _rewrite(src, model, **{"policy.pth": buf.getvalue()})
        return model, []
    if where == "data":
        _rewrite(src, model, data=_data_with(src, policy_class=_blob(evil)))
        return model, []
    vn = tmp_path / "vecnormalize.pkl"
    vn.write_bytes(evil)
    return src, ["--vecnormalize", str(vn)]


@pytest.mark.parametrize("where", ["policy.pth", "data", "vecnormalize.pkl"])
def test_a_planted_code_running_pickle_is_refused_with_nothing_written(tmp_path, capsys, where):
    model, extra = _planted(tmp_path, where)
    out = tmp_path / "run"
    rc = main(["import", model, "--env", "CartPole-v1", "--out", str(out)] + extra)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("msrl: error:") and "system" in err[0], err
    assert not out.exists() and not (tmp_path / "ran").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".run")]


def _kwargs_naming(key, module, name):
    """A protocol-2 pickle of {key: module.name} (a class reference; never loaded)."""
    k = key.encode()
    return b"\x80\x02}q\x00X" + struct.pack("<I", len(k)) + k + f"q\x01c{module}\n{name}\nq\x02s.".encode()


REFUSED = {
    "RecurrentPPO": (dict(policy_class=b"csb3_contrib.common.recurrent.policies\nRecurrentActorCriticPolicy\n."),
                     "RecurrentPPO"),
    "custom extractor": (dict(policy_kwargs=_kwargs_naming("features_extractor_class", "mypkg.extractors", "MyCNN")),
                         "mypkg.extractors.MyCNN"),
    "GELU": (dict(policy_kwargs=_kwargs_naming("activation_fn", "torch.nn.modules.activation", "GELU")), "GELU"),
    "SiLU": (dict(policy_kwargs=_kwargs_naming("activation_fn", "torch.nn.modules.activation", "SiLU")), "SiLU"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_unsupported_policies_are_refused_by_name(tmp_path, capsys, case):
    blobs, named = REFUSED[case]
    src, model = os.path.join(FIXTURES, "ppo_cartpole.zip"), str(tmp_path / "model.zip")
    _rewrite(src, model, data=_data_with(src, **{k: _blob(v) for k, v in blobs.items()}))
    rc = main(["import", model, "--env", "CartPole-v1", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and named in err[0], err
    assert not (tmp_path / "run").exists()


def test_wrong_environment_and_missing_env_are_refused(tmp_path, capsys):
    model = os.path.join(FIXTURES, "ppo_cartpole.zip")
    assert main(["import", model, "--env", "Acrobot-v1", "--out", str(tmp_path / "a")]) == 2
    assert "observation_space has shape (4,), Acrobot-v1 observes Box (6,)" in capsys.readouterr().err
    assert main(["import", model, "--out", str(tmp_path / "b")]) == 2
    assert "pass --env ID" in capsys.readouterr().err
    assert not os.listdir(tmp_path)


def test_sb3_itself_predicts_what_the_imported_cell_acts(tmp_path):
    """Where Stable-Baselines3 is installed: a fresh SB3 model, saved, imported and checked against
    SB3's own predictions (``--check sb3``). The committed-fixture tests above are the ones CI runs."""
    sb3 = pytest.importorskip("stable_baselines3")
    import torch as th
    for algo, env, kwargs in (("PPO", "Pendulum-v1", dict(use_sde=True, policy_kwargs=dict(net_arch=[8]))),
                              ("DQN", "CartPole-v1", dict(policy_kwargs=dict(net_arch=[8], activation_fn=th.nn.Tanh)))):
        path = str(tmp_path / f"{algo}.zip")
        getattr(sb3, algo)("MlpPolicy", env, seed=1, **kwargs).save(path)
        assert main(["import", path, "--env", env, "--out", str(tmp_path / algo), "--check", "sb3"]) == 0
        with open(tmp_path / algo / "summary.json") as fh:
            assert json.load(fh)["check"]["passed"]


@pytest.mark.slow
def test_sb3_page_example_runs_as_written(tmp_path):
    """docs/sb3.md's bash block, command by command, from a directory holding the fixtures at the
    path the page names (tests/ linked), as a newcomer runs it from the repository root."""
    import shlex
    import subprocess
    import sys

    text = open(os.path.join(ROOT, "docs", "sb3.md"), encoding="utf-8").read()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    os.symlink(os.path.join(ROOT, "tests"), tmp_path / "tests")
    exe = os.path.join(os.path.dirname(sys.executable), "msrl")
    program = [exe] if os.path.isfile(exe) else [sys.executable, "-m", "msrl_consistent"]
    commands = [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]
    assert [c[1] for c in commands] == ["import", "export", "verify", "verify", "train"]
    for argv in commands:
        r = subprocess.run(program + argv[1:], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (argv, r.stderr[-2000:])
    assert os.path.isfile(tmp_path / "runs" / "sb3-cartpole-more" / "summary.json")
