"""Recurrent PPO (policy.recurrent): the LSTM's arithmetic, the state convention, the update over
whole sequences, acting == the policy cell, reproducibility, the carried state of a deployed
policy and the refusals."""
import json
import os

import numpy as np
import pytest
from helpers import CONFIGS, msrl, train_run
from mindspore import Tensor

from msrl_consistent import registry
from msrl_consistent.algorithms.ppo.recurrent import RecurrentPPOLoss
from msrl_consistent.config import ConfigError, load_config
from msrl_consistent.networks.lstm import LSTM
from msrl_consistent.runtime import load_policy

CONFIG = "ppo/CartPoleNoVel-v1-lstm.yaml"
# short sequences (T = 8) keep the unrolled graph's compile time small
SMALL = ["total_timesteps=256", "env.n_envs=4", "algo.n_steps=8", "algo.batch_size=16", "algo.n_epochs=2",
         "policy.lstm_hidden_size=16", "eval.freq=0", "eval.episodes=2"]


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def test_lstm_step_is_the_pytorch_formula_with_the_reset_rule():
    """One step against NumPy float64 (PyTorch's gate order i, f, g, o); where episode_start is 1 the
    result is the zero state's, elsewhere the carried state's."""
    rng = np.random.default_rng(0)
    lstm = LSTM(rng, 5, 8)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    h = rng.standard_normal((4, 8)).astype(np.float32)
    c = rng.standard_normal((4, 8)).astype(np.float32)
    start = np.array([0, 1, 0, 1], np.float32)
    h2, c2 = (o.asnumpy() for o in lstm(Tensor(x), Tensor(h), Tensor(c), Tensor(start)))
    w, u, b = (p.asnumpy().astype(np.float64) for p in (lstm.w_ih, lstm.w_hh, lstm.bias))
    keep = (1.0 - start)[:, None]
    g = x @ w.T + b + (h * keep) @ u.T
    i, f, gg, o = np.split(g, 4, axis=1)
    c_ref = _sigmoid(f) * (c * keep) + _sigmoid(i) * np.tanh(gg)
    h_ref = _sigmoid(o) * np.tanh(c_ref)
    np.testing.assert_allclose(c2, c_ref, atol=2e-6)
    np.testing.assert_allclose(h2, h_ref, atol=2e-6)
    zero = np.zeros_like(h)
    h0, c0 = (o.asnumpy() for o in lstm(Tensor(x), Tensor(zero), Tensor(zero), Tensor(np.zeros(4, np.float32))))
    np.testing.assert_array_equal(h2[start == 1], h0[start == 1])
    np.testing.assert_array_equal(c2[start == 1], c0[start == 1])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_run(tmp_path_factory.mktemp("recurrent"), CONFIG, SMALL, "run")


def _acting_is_the_policy_cell(algo):
    """The rollout graph with zero noise (the distribution's mode) gives the policy cell's action and
    the policy cell's next actor state, bit for bit, from the same observations and state."""
    n, hid = 16, algo.agent.lstm_actor.hidden
    rng = np.random.default_rng(1)
    obs = (rng.standard_normal((n, algo.spec.obs_dim)) * 2.0).astype(np.float32)
    state = rng.standard_normal((n, 4 * hid)).astype(np.float32)
    starts = (rng.random(n) < 0.3).astype(np.float32)
    noise = np.zeros((n,) + algo.distribution.noise(rng, 1).shape[1:], np.float32)
    env_a, _, _, _, nxt = (o.asnumpy() for o in algo.rollout_cell(Tensor(obs), Tensor(state), Tensor(starts),
                                                                 Tensor(noise)))
    action, h, c = (o.asnumpy() for o in algo.policy(Tensor(obs), Tensor(state[:, :hid]),
                                                     Tensor(state[:, hid:2 * hid]), Tensor(starts)))
    np.testing.assert_array_equal(env_a, action)
    np.testing.assert_array_equal(nxt[:, :hid], h)
    np.testing.assert_array_equal(nxt[:, hid:2 * hid], c)


@pytest.mark.slow
def test_rollout_acts_and_carries_the_state_the_policy_cell_computes(trained):
    _acting_is_the_policy_cell(trained[2])


BOX = ("ppo/Pendulum-v1.yaml", ["policy.recurrent=true", "env.id=PendulumNoVel-v1", "env.n_envs=4", "env.max_episode_steps=5",
                                 "algo.n_steps=8", "algo.batch_size=16", "algo.n_epochs=2", "total_timesteps=96",
                                 "policy.lstm_hidden_size=16", "eval.freq=0", "eval.episodes=1"])


# gSDE (exploration matrices redrawn every 4 steps) and sequences of 4 steps cut from 8-step rollouts
BPTT = (BOX[0], BOX[1] + ["algo.use_sde=true", "algo.sde_sample_freq=4", "algo.bptt_steps=4"])


@pytest.mark.slow
@pytest.mark.parametrize("config, overrides", [(CONFIG, SMALL + ["total_timesteps=96"]), BOX, BPTT],
                         ids=["discrete", "box", "gsde-truncated"])
def test_sequences_replay_the_rollout_states(tmp_path, config, overrides):
    """The update phase's unrolled LSTM, started from the state stored at each sequence's first step
    and reset where episodes started, recomputes the rollout's log-probabilities: before any update,
    every probability ratio is 1 within 1e-5 (a reset one step off, or a lost initial state, moves
    the ratios of the steps after it far from 1). Discrete and Box actions, and gSDE with rollouts
    cut into shorter sequences (algo.bptt_steps); the rollout acts as the policy cell on all."""
    cfg = load_config(os.path.join(CONFIGS, config), overrides)
    algo = registry.get("ppo")(cfg)
    cell = RecurrentPPOLoss(algo.agent, cfg.algo, algo.seq_len)
    tiny = Tensor(np.float32(1e-5))
    seen = []

    def train(buf):  # in place of the update: the parameters stay the initial ones
        data = buf.sequences()
        out = cell(*(Tensor(data[k]) for k in algo.data_keys), tiny, tiny)
        seen.append((data, float(out[4].asnumpy()), float(out[5].asnumpy())))
        return {}

    algo.train = train
    algo.learn(str(tmp_path / "run"), progress=False)
    assert len(seen) == 3
    assert any(d["episode_starts"][:, 1:].any() for d, _, _ in seen)  # episodes started inside a rollout
    assert np.abs(seen[-1][0]["state0"]).max() > 0  # a later rollout starts from a carried state
    if algo.seq_len < cfg.algo.n_steps:  # each env's second sequence starts from the state carried into it
        first = seen[0][0]
        assert first["obs"].shape[:2] == (8, 4) and np.abs(first["state0"][1::2]).max() > 0
    for _, approx_kl, clip_fraction in seen:
        assert clip_fraction == 0.0, clip_fraction  # every |ratio - 1| <= the clip range, 1e-5
        # mean(exp(d) - 1 - d) in float32: its rounding alone is ~1e-8 (AVX-512 kernels: -9.3e-9)
        assert abs(approx_kl) < 1e-7, approx_kl
    _acting_is_the_policy_cell(algo)


@pytest.mark.slow
def test_same_seed_same_parameters_and_eval_carries_the_state(trained, tmp_path):
    run_dir, summary, _ = trained
    _, again, _ = train_run(tmp_path, CONFIG, SMALL, "again")
    assert again["params_sha256"] == summary["params_sha256"]
    r = msrl("eval", run_dir, "--episodes", "2")
    assert r.returncode == 0, r.stderr
    assert "mean return" in r.stdout


@pytest.mark.slow
def test_two_resumes_of_a_recurrent_run_are_identical(tmp_path):
    """A resumed run re-seeds its envs, so every env starts an episode: the carried state starts at
    zero with every flag at 1, as at a run's start; two resumes from one checkpoint end identical."""
    from helpers import copy_run_at_checkpoint

    from msrl_consistent.algorithms import PPO

    run, _, _ = train_run(tmp_path, CONFIG, SMALL + ["total_timesteps=512", "checkpoint.freq=256", "checkpoint.keep=5"],
                          "base")
    hashes = []
    for name in ("r1", "r2"):
        d = copy_run_at_checkpoint(run, tmp_path / name, "step-000000256.safetensors")
        algo = PPO.resume(d)
        assert algo.num_timesteps == 256
        hashes.append(algo.learn(d, progress=False)["params_sha256"])
    assert hashes[0] == hashes[1]


@pytest.mark.slow
def test_deployed_policy_carries_the_state_per_env(trained):
    """``act`` carries the state per env (the same actions as ``step`` with the state fed back),
    ``reset(mask)`` restarts chosen envs, and a wrong batch or state is a ValueError naming it."""
    run_dir, _, _ = trained
    pi = load_policy(run_dir)
    rng = np.random.default_rng(2)
    seq = rng.standard_normal((12, 3, pi.obs_dim)).astype(np.float32)
    hid = pi.state_size
    state = (np.zeros((3, hid), np.float32), np.zeros((3, hid), np.float32))
    starts = np.ones(3, np.float32)
    pi.reset()
    for t in range(12):
        if t == 6:
            pi.reset(np.array([False, True, False]))
            starts = np.array([0, 1, 0], np.float32)
        a_carried = pi.act(seq[t])
        a_owned, state = pi.step(seq[t], state, starts)
        starts = np.zeros(3, np.float32)
        np.testing.assert_array_equal(a_carried, a_owned)
    with pytest.raises(ValueError, match="carries the state of 3 envs, got 2"):
        pi.act(seq[0, :2])
    with pytest.raises(ValueError, match="boolean mask of shape \\(3,\\)"):
        pi.reset(np.array([True, False]))
    with pytest.raises(ValueError, match=f"state h as finite float32 of shape \\(3, {hid}\\)"):
        pi.step(seq[0], (np.zeros((3, hid + 1)), np.zeros((3, hid))), np.zeros(3))
    with pytest.raises(ValueError, match="episode_start as 3 flags of 0 or 1"):
        pi.step(seq[0], state, np.full(3, 0.5))
    pi.reset()
    assert pi.act(seq[0, :2]).shape == (2,)  # after reset(): any number of envs


@pytest.mark.parametrize("override, message", [
    (["algo.batch_size=20"], "batch_size must be n_steps times a number of envs from 1 to env.n_envs = 4: one of "
                             "8, 16, 24, 32"),
    (["policy.shared=true"], "policy.shared"),
    (["algo.bptt_steps=3"], "key 'algo.bptt_steps' has value 3; the rollout's n_steps = 8 steps per env are cut into "
                            "sequences of bptt_steps, so it must divide n_steps: one of 1, 2, 4, 8"),
    (["algo.bptt_steps=4", "algo.batch_size=10"], "batch_size must be bptt_steps times a number of sequences from 1 "
                                                  "to 8: one of 4, 8, 12, 16, 20, 24, 28, 32"),
])
def test_recurrent_refusals_name_the_key(override, message):
    cfg = load_config(os.path.join(CONFIGS, CONFIG), SMALL + override)
    with pytest.raises(ConfigError, match=message.replace("(", "\\(").replace(")", "\\)")):
        registry.get(cfg.algorithm)(cfg)


def test_recurrent_off_policy_is_refused():
    cfg = load_config(os.path.join(CONFIGS, "sac", "Pendulum-v1.yaml"), ["policy.recurrent=true"])
    with pytest.raises(ConfigError, match="algorithm 'sac' has no recurrent policy"):
        registry.get(cfg.algorithm)(cfg)


@pytest.mark.slow
def test_population_of_recurrent_runs_trains_members_one_after_another(tmp_path):
    sets = [a for kv in SMALL for a in ("--set", kv)]
    pop = tmp_path / "pop"
    r = msrl("train", os.path.join(CONFIGS, CONFIG), "--seeds", "0-1", *sets, "--run-dir", str(pop))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "one after another because key 'policy.recurrent' is set" in r.stdout, r.stdout
    single = tmp_path / "single"
    r = msrl("train", os.path.join(CONFIGS, CONFIG), "--seed", "1", *sets, "--run-dir", str(single), "--quiet")
    assert r.returncode == 0, r.stderr
    with open(pop / "seed1" / "summary.json") as a, open(single / "summary.json") as b:
        assert json.load(a)["params_sha256"] == json.load(b)["params_sha256"]
