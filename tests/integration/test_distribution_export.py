"""`msrl export --outputs action,distribution`: the action distribution's parameters as further
graph outputs, the KL divergence between the training cell's distribution and every backend's in
`msrl verify` and `python policy.py check`, and sampling on the deploying side by training's formula
(the same noise gives the training cell's action)."""
import json
import os

import numpy as np
import pytest
from helpers import train_run
from test_spaces_train import MULTI_CONFIG

from msrl_consistent.cli import main
from msrl_consistent.runtime import TrainCellPolicy, load_policy

SMALL = ["eval.freq=0", "eval.episodes=1", "log.tensorboard=false"]
PPO_TINY = ["algo.n_steps=64", "algo.batch_size=64", "algo.n_epochs=1", "env.n_envs=2"]
LSTM_TINY = ["env.n_envs=4", "algo.n_steps=8", "algo.batch_size=16", "algo.n_epochs=2", "policy.lstm_hidden_size=16"]
CASES = {  # name -> (config, overrides, distribution kind)
    "categorical": ("ppo/CartPole-v1.yaml", PPO_TINY, "categorical"),
    "gaussian": ("ppo/Pendulum-v1.yaml", PPO_TINY, "gaussian"),
    "gsde": ("ppo/Pendulum-v1-gsde.yaml", PPO_TINY, "state_dependent_gaussian"),
    "sac": ("sac/Pendulum-v1.yaml", ["algo.learning_starts=64", "algo.batch_size=32", "policy.net_arch=[32,32]"],
            "squashed_gaussian"),
    "multidiscrete": ("MsrlTestMultiDiscrete-v0", PPO_TINY, "multi_categorical"),
    "multibinary": ("MsrlTestMultiBinary-v0", PPO_TINY, "bernoulli"),
    "recurrent": ("ppo/CartPoleNoVel-v1-lstm.yaml", LSTM_TINY, "categorical"),
    "recurrent-gsde": ("ppo/PendulumNoVel-v1-lstm.yaml", LSTM_TINY + ["algo.bptt_steps=8"], "state_dependent_gaussian"),
}
BACKENDS = ("mindspore", "onnxruntime", "mindspore_lite")


@pytest.fixture(scope="module")
def dist_export(tmp_path_factory, lite_runtime):
    """dist_export(name) -> (run_dir, export_dir): a 256-step run exported with its distribution
    (MindIR, ONNX, Lite); built once per module."""
    import spaces_envs  # noqa: F401  (registers the test envs)
    made = {}

    def get(name):
        if name not in made:
            tmp = tmp_path_factory.mktemp(name)
            config, sets, _ = CASES[name]
            if config.startswith("Msrl"):
                (tmp / "ppo.yaml").write_text(MULTI_CONFIG.format(env_id=config))
                config = str(tmp / "ppo.yaml")
            run, _, _ = train_run(tmp, config, SMALL + sets + ["total_timesteps=256"], "run")
            out = str(tmp / "export")
            assert main(["export", run, "--out", out, "--format", "mindir,onnx,lite", "--golden", "64",
                         "--outputs", "action,distribution"]) == 0
            made[name] = run, out
        return made[name]
    return get


@pytest.mark.parametrize("name", sorted(CASES))
def test_verify_reports_the_kl_on_every_backend(dist_export, name, capsys):
    """Every kind on MindSpore, ONNX Runtime and Lite: the manifest names the outputs, verify passes
    with the KL figures beside the action check, exactly 0 on MindSpore (the same graph)."""
    run, out = dist_export(name)
    capsys.readouterr()
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    dist = manifest["io"]["distribution"]
    assert dist["kind"] == CASES[name][2] and dist["kl_tolerance"] == 1e-6
    for backend in BACKENDS:
        assert main(["verify", out, "--backend", backend, "--episodes", "1"]) == 0, backend
        text = capsys.readouterr().out
        assert f"{dist['kind']} distribution: KL(training cell || backend) max" in text, text
        report = json.load(open(os.path.join(out, f"report-verify-{backend}.json")))
        d = report["golden"]["distribution"]
        assert d["passed"] and d["rows_above"] == 0 and d["kl_max"] <= 1e-6, (backend, d)
        assert any(c["name"].startswith("golden set action distributions") and c["passed"] for c in report["criteria"])
        if backend == "mindspore":
            assert d["kl_max"] == 0.0


@pytest.mark.parametrize("name", sorted(CASES))
def test_sampling_on_the_deploying_side_gives_the_training_cells_action(dist_export, name):
    """act(obs, deterministic=False, rng) on the exported graph (MindSpore) draws the noise training
    draws and applies training's formula: the acting cell of training, fed the same noise, returns
    the same actions (bit for bit for the discrete kinds and the Gaussian; gSDE's matrix product and
    SAC's tanh within float32 rounding)."""
    from mindspore import Tensor

    run, out = dist_export(name)
    if name.startswith("recurrent"):
        return _recurrent_sampling(run, out, exact=name == "recurrent")
    exported = load_policy(out, backend="mindspore")
    obs, _ = exported.export.golden()
    obs = obs[:8]
    got = exported.act(obs, deterministic=False, rng=np.random.default_rng(7))
    again = exported.act(obs, deterministic=False, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(got, again)
    reference = TrainCellPolicy(run)
    agent, n = reference.agent, len(obs)
    if name == "sac":
        from msrl_consistent.algorithms.sac import SACAct
        noise = np.random.default_rng(7).standard_normal((n, agent.spec.n_actions)).astype(np.float32)
        want = SACAct(agent)(Tensor(obs), Tensor(noise)).asnumpy()[:, :agent.spec.n_actions]
    else:
        from msrl_consistent.algorithms.ppo import PPORollout
        noise = agent.distribution().noise(np.random.default_rng(7), n)
        want = PPORollout(agent)(Tensor(obs), Tensor(noise))[0].asnumpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    if name in ("gsde", "sac"):
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
    else:
        np.testing.assert_array_equal(got, want)
    sampled_train = reference.with_distribution().act(obs, deterministic=False, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(sampled_train, got)  # the training cell's outputs through the same formula
    assert not np.array_equal(exported.act(obs, deterministic=False, rng=np.random.default_rng(8)), got) \
        or name == "categorical"  # another seed, other noise (a near-certain CartPole policy may agree)


def _recurrent_sampling(run, out, exact):
    """A recurrent policy: act(obs, deterministic=False, rng) step after step carries the state as
    the deterministic act does, and samples what training's rollout cell samples from the same
    noise (its state carried the same way, from zero at the first step)."""
    from mindspore import Tensor

    from msrl_consistent.algorithms.ppo.recurrent import RecurrentRollout
    exported = load_policy(out, backend="mindspore")
    seqs = exported.export.golden_sequences()
    obs = seqs["obs"][:12]  # (steps, lanes, obs_dim); the lanes' first episodes
    rng = np.random.default_rng(7)
    exported.reset()
    got = [exported.act(o, deterministic=False, rng=rng) for o in obs]
    agent = TrainCellPolicy(run).agent
    cell, n, lanes = RecurrentRollout(agent), agent.lstm_actor.hidden, obs.shape[1]
    state, start, rng = np.zeros((lanes, 4 * n), np.float32), np.ones(lanes, np.float32), np.random.default_rng(7)
    for t, o in enumerate(obs):
        noise = agent.distribution().noise(rng, lanes)
        env_a, _, _, _, state = cell(Tensor(o), Tensor(state), Tensor(start), Tensor(noise))
        state, start = state.asnumpy(), np.zeros(lanes, np.float32)
        if exact:
            np.testing.assert_array_equal(got[t], env_a.asnumpy(), err_msg=f"step {t}")
        else:  # gSDE's exploration matrix product: NumPy's against MindSpore's BatchMatMul
            np.testing.assert_allclose(got[t], env_a.asnumpy(), rtol=0, atol=2e-6, err_msg=f"step {t}")
    with pytest.raises(ValueError, match="depends on its state"):
        exported.distribution(obs[0])


def test_a_sample_needs_a_distribution_export_and_a_generator(cartpole_run, tmp_path, capsys):
    out = str(tmp_path / "actions-only")
    assert main(["export", cartpole_run, "--out", out, "--golden", "16"]) == 0
    policy = load_policy(out, backend="mindspore")
    obs = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match="--outputs action,distribution"):
        policy.act(obs, deterministic=False, rng=np.random.default_rng(0))
    capsys.readouterr()


def test_the_board_checks_the_distribution(dist_export, board_path):
    """`python policy.py check` on a board with NumPy and onnxruntime only reports the KL and passes."""
    from helpers import board
    _, out = dist_export("gaussian")
    r = board(board_path, out, "check", "--backend", "onnxruntime", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    d = report["golden"]["distribution"]
    assert d["kind"] == "gaussian" and d["passed"] and d["kl_max"] <= 1e-6


def test_the_documented_board_sampling_runs_in_an_export_directory(dist_export, tmp_path):
    """docs/deployment.md's sampling example, verbatim, in a copy of a Pendulum distribution export."""
    import shutil

    from helpers import run_doc_python
    _, out = dist_export("gaussian")
    blocks = run_doc_python("docs/deployment.md", "The whole action distribution",
                            shutil.copytree(out, tmp_path / "doc"))
    assert len(blocks) == 1 and "deterministic=False" in blocks[0]


@pytest.mark.parametrize("config,words", [
    ("td3/Pendulum-v1.yaml", "deterministic"), ("dqn/CartPole-v1.yaml", "deterministic")])
def test_policies_without_an_exportable_distribution_are_refused(tmp_path, config, words, capsys):
    sets = {"td3": ["algo.learning_starts=32", "algo.batch_size=16"], "dqn": ["algo.learning_starts=32"]}[config[:3]]
    run, _, _ = train_run(tmp_path, config, SMALL + sets + ["total_timesteps=64"], "run")
    capsys.readouterr()
    out = str(tmp_path / "export")
    assert main(["export", run, "--out", out, "--outputs", "action,distribution"]) == 2
    err = capsys.readouterr().err
    assert "--outputs distribution" in err and words in err and "Traceback" not in err
    assert not os.path.exists(out)


@pytest.mark.parametrize("text", ["distribution", "action,logits", "action,action", ""])
def test_bad_outputs_are_refused(cartpole_run, tmp_path, text, capsys):
    assert main(["export", cartpole_run, "--out", str(tmp_path / "x"), "--outputs", text]) == 2
    assert "--outputs" in capsys.readouterr().err


def test_a_tampered_distribution_section_is_refused(dist_export, tmp_path):
    """A manifest whose io.distribution does not fit the action space or the graph is refused with
    the field named."""
    import shutil

    from msrl_consistent.deploy import ExportError, open_export
    _, out = dist_export("categorical")
    for key, value, words in [("kind", "gaussian", "does not fit the Discrete action space"),
                              ("outputs", [], "io.distribution.outputs"),
                              ("kl_tolerance", 1.0, "io.distribution.kl_tolerance")]:
        bad = str(tmp_path / f"bad-{key}")
        shutil.copytree(out, bad)
        path = os.path.join(bad, "manifest.json")
        m = json.load(open(path))
        m["io"]["distribution"][key] = value
        json.dump(m, open(path, "w"))
        with pytest.raises(ExportError, match=words):
            open_export(bad, hashes=False)


def test_a_distribution_that_differs_fails_verify(pendulum_run, tmp_path, monkeypatch, capsys):
    """A backend whose std is 1% off the training cell's (what a forgotten scale or an fp16 log std
    does) fails verify on the KL alone, its actions still passing: planted as a golden set whose
    recorded std is 1% larger than the graph's."""
    original = TrainCellPolicy.distribution_at_batch

    def planted(self, obs, batch):
        params = original(self, obs, batch)
        return {**params, "std": (params["std"] * np.float32(1.01)).astype(np.float32)}

    monkeypatch.setattr(TrainCellPolicy, "distribution_at_batch", planted)
    out = str(tmp_path / "planted")
    assert main(["export", pendulum_run, "--out", out, "--format", "mindir,onnx", "--golden", "64",
                 "--outputs", "action,distribution"]) == 0
    capsys.readouterr()
    assert main(["verify", out, "--backend", "onnxruntime", "--episodes", "0"]) == 1
    text = capsys.readouterr().out
    assert "[ok] golden set within atol" in text and "[FAIL] golden set action distributions" in text, text
    d = json.load(open(os.path.join(out, "report-verify-onnxruntime.json")))["golden"]["distribution"]
    # KL(training N(m, (1.01 s)^2) || backend N(m, s^2)) per dimension: log(1 / 1.01) + 1.01^2 / 2 - 1/2 = 9.9e-5
    assert d["rows_above"] == 64 and d["kl_max"] == pytest.approx(np.log(1 / 1.01) + 1.01 ** 2 / 2 - 0.5, rel=1e-3)
