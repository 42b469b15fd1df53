"""DQN: short CartPole runs (determinism, the fused acting call, resume), the target-update clock,
epsilon-greedy on the host, the exported greedy cell verified on every backend, a Box action
space refused."""
import json
import os

import numpy as np
import pytest
from helpers import CONFIGS, copy_run_at_checkpoint, train_run
from mindspore import Tensor

from msrl_consistent import registry
from msrl_consistent.algorithms.dqn import DQNAct
from msrl_consistent.cli import main
from msrl_consistent.config import load_config

SHORT = ["total_timesteps=1200", "algo.learning_starts=300", "algo.train_freq=50", "algo.gradient_steps=20",
         "algo.target_update_interval=100", "algo.exploration_fraction=0.5", "eval.freq=0", "eval.episodes=1",
         "policy.net_arch=[32, 32]", "algo.batch_size=32", "log.tensorboard=false"]


def _params(cell):
    return [p.asnumpy().copy() for p in cell.get_parameters()]


@pytest.mark.slow
def test_dqn_deterministic_and_fused_acting_identical(tmp_path):
    _, s1, a1 = train_run(tmp_path, "dqn/CartPole-v1.yaml", SHORT, "a")
    _, s2, _ = train_run(tmp_path, "dqn/CartPole-v1.yaml", SHORT, "b")
    _, s3, _ = train_run(tmp_path, "dqn/CartPole-v1.yaml", SHORT + ["seed=1"], "c")
    _, s4, _ = train_run(tmp_path, "dqn/CartPole-v1.yaml", SHORT + ["algo.fuse_act=false"], "d")
    assert s1["params_sha256"] == s2["params_sha256"] == s4["params_sha256"] != s3["params_sha256"]
    assert s1["n_updates"] == 18 * 20  # rounds past learning_starts (steps 350 .. 1200), 20 gradient steps each
    rows = [json.loads(line) for line in open(os.path.join(tmp_path, "a", "metrics.jsonl"))]
    train = [r for r in rows if "loss" in r and "exploration_rate" in r]
    assert train and all(np.isfinite(r["loss"]) for r in train)
    assert train[-1]["exploration_rate"] == pytest.approx(0.04)  # past exploration_fraction: the final epsilon


def test_target_network_follows_the_environment_step_clock():
    cfg = load_config(os.path.join(CONFIGS, "dqn", "CartPole-v1.yaml"),
                      SHORT + ["algo.target_update_interval=100", "algo.gradient_steps=5"])
    algo = registry.get("dqn")(cfg)
    buf = algo.make_buffer(1)
    rng = np.random.default_rng(0)
    for i in range(200):
        o = rng.normal(size=(1, 4)).astype(np.float32)
        buf.add(o, o, np.array([[i % 2]], np.float32), np.ones(1, np.float32), np.zeros(1, bool), np.zeros(1, bool))
    initial = _params(algo.agent.actor)
    algo.num_timesteps = 99  # no multiple of 100 vector steps passed: the target stays the initial copy
    algo.train(5)
    assert all(np.array_equal(t, i) for t, i in zip(_params(algo.agent.q_target), initial))
    trained = _params(algo.agent.actor)
    assert not all(np.array_equal(t, i) for t, i in zip(trained, initial))
    algo.num_timesteps = 250  # steps 100 and 200 passed: the target becomes the Q-network of that time (tau 1)
    algo.train(5)
    assert all(np.array_equal(t, q) for t, q in zip(_params(algo.agent.q_target), trained))
    assert not all(np.array_equal(t, q) for t, q in zip(_params(algo.agent.q_target), _params(algo.agent.actor)))


def test_epsilon_greedy_schedule_and_acting_cell():
    cfg = load_config(os.path.join(CONFIGS, "dqn", "CartPole-v1.yaml"), ["log.tensorboard=false"])
    algo = registry.get("dqn")(cfg)
    c = cfg.algo
    assert algo.exploration_rate() == 1.0
    algo.num_timesteps = int(cfg.total_timesteps * c.exploration_fraction / 2)
    assert algo.exploration_rate() == pytest.approx((1.0 + c.exploration_final_eps) / 2, abs=1e-4)
    algo.num_timesteps = cfg.total_timesteps
    assert algo.exploration_rate() == c.exploration_final_eps
    noise = algo.exploration_noise(20000)
    assert abs(noise[:, 0].mean() - c.exploration_final_eps) < 0.01 and set(np.unique(noise[:, 1])) == {0.0, 1.0}
    obs = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)
    act = DQNAct(algo.agent)
    greedy = algo.agent.policy_cell()(Tensor(obs)).asnumpy()
    flags = np.zeros((64, 2), np.float32)
    flags[:, 1] = 1 - greedy  # the other action: chosen only where the coin says explore
    flags[::2, 0] = 1.0
    out = act(Tensor(obs), Tensor(flags)).asnumpy()
    assert np.array_equal(out[:, 0], out[:, 1])
    assert np.array_equal(out[1::2, 0], greedy[1::2]) and np.array_equal(out[::2, 0], 1 - greedy[::2])


@pytest.mark.slow
def test_dqn_resumes_from_a_checkpoint_identically(tmp_path):
    run, _, _ = train_run(tmp_path, "dqn/CartPole-v1.yaml",
                          SHORT + ["checkpoint.freq=600", "checkpoint.keep=5", "algo.save_replay_buffer=true"], "base")
    hashes = []
    for name in ("r1", "r2"):
        d = copy_run_at_checkpoint(run, tmp_path / name, "step-000000600.safetensors")
        algo = registry.get("dqn").resume(d)
        assert algo.num_timesteps == 600 and algo.buffer is not None and algo.buffer.size == 600
        hashes.append(algo.learn(d, progress=False)["params_sha256"])
    assert hashes[0] == hashes[1]


@pytest.mark.slow
def test_dqn_export_verifies_on_every_backend(tmp_path, capsys, lite_runtime):
    run, _, _ = train_run(tmp_path, "dqn/CartPole-v1.yaml", SHORT, "run")
    out = str(tmp_path / "export")
    assert main(["export", run, "--out", out, "--format", "mindir,onnx,lite", "--golden", "256"]) == 0
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["algorithm"] == "dqn"
    for backend in ("mindspore", "onnxruntime", "lite"):
        capsys.readouterr()
        rc = main(["verify", out, "--backend", backend, "--episodes", "1", "--json"])
        r = json.loads(capsys.readouterr().out)
        assert rc == 0 and r["passed"], (backend, r)
        assert r["golden"]["agreement"] == 1.0  # Discrete actions: equal, every row


def test_box_actions_refused(tmp_path, capsys):
    rc = main(["train", os.path.join(CONFIGS, "dqn", "CartPole-v1.yaml"), "--run-dir", str(tmp_path / "r"),
               "--set", "env.id=Pendulum-v1", "--quiet"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "dqn needs a Discrete action space" in err and "Box" in err and "Traceback" not in err
