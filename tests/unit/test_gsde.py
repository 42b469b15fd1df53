"""gSDE for PPO (SB3's StateDependentNoiseDistribution, full_std, exp, learn_features=False):
the rollout action, log-prob and the loss's entropy against a NumPy reference of SB3's formulas
(and against SB3's own distribution when torch and stable-baselines3 are installed); the
noise schedule of sde_sample_freq; config errors."""
import math
import os

import gymnasium as gym
import numpy as np
import pytest
from helpers import CONFIGS
from mindspore import Tensor

from msrl_consistent import registry
from msrl_consistent.algorithms.ppo import PPOLoss
from msrl_consistent.cli import main
from msrl_consistent.config import ConfigError, load_config

GSDE = os.path.join(CONFIGS, "ppo", "Pendulum-v1-gsde.yaml")
SMALL = ["env.n_envs=3", "algo.n_steps=16", "algo.batch_size=16", "eval.freq=0", "eval.episodes=1",
         "log.tensorboard=false", "policy.net_arch=[8, 5]"]
EPS = 1e-6  # SB3's StateDependentNoiseDistribution epsilon


def _algo(extra=()):
    cfg = load_config(GSDE, SMALL + list(extra))
    algo = registry.get("ppo")(cfg)
    rng = np.random.default_rng(7)
    # a non-constant log_std matrix, so each (latent, action) entry matters
    algo.agent.log_std.set_data(Tensor(rng.uniform(-1.5, 0.5, algo.agent.log_std.shape).astype(np.float32)))
    return algo


def _numpy_forward(algo, obs):
    """latent (tanh trunk output) and mean action, from the agent's parameters with NumPy."""
    trunk, head = algo.agent.actor.first, algo.agent.actor.second
    h = obs.astype(np.float64)
    for layer in trunk.layers:
        if hasattr(layer, "weight"):
            h = h @ layer.weight.asnumpy().T.astype(np.float64) + layer.bias.asnumpy()
        else:
            h = np.tanh(h)
    mean = h @ head.weight.asnumpy().T.astype(np.float64) + head.bias.asnumpy()
    return h, mean


def _sb3_reference(latent, mean, log_std, eps, actions=None):
    """SB3's formulas in NumPy: exploration matrix std * eps_i per row, noise latent @ matrix,
    variance = (latent^2) @ (std^2), Normal(mean, sqrt(variance + 1e-6)) log-prob and entropy."""
    std = np.exp(log_std.astype(np.float64))
    noise = np.einsum("nl,nla->na", latent, std * eps)
    if actions is None:
        actions = mean + noise
    sigma = np.sqrt(latent ** 2 @ std ** 2 + EPS)
    log_prob = (-(actions - mean) ** 2 / (2 * sigma ** 2) - np.log(sigma) - math.log(math.sqrt(2 * math.pi))).sum(-1)
    entropy = (0.5 + 0.5 * math.log(2 * math.pi) + np.log(sigma)).sum(-1)
    return actions, log_prob, entropy


def test_agent_shapes_and_latent_is_the_actor_trunk():
    algo = _algo()
    assert tuple(algo.agent.log_std.shape) == (5, 1)  # (last hidden size, action dim)
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    _, mean = _numpy_forward(algo, obs)
    # the exported / evaluated policy is the mean, clipped to the Box
    np.testing.assert_allclose(algo.act_deterministic(obs), np.clip(mean, -2, 2), rtol=1e-5, atol=1e-6)


def test_rollout_action_log_prob_and_loss_entropy_match_sb3_formulas():
    algo = _algo()
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(3, 3)).astype(np.float32) * 2
    eps = rng.standard_normal((3,) + tuple(algo.agent.log_std.shape)).astype(np.float32)
    env_a, a, logp, value = (o.asnumpy() for o in algo.rollout_cell(Tensor(obs), Tensor(eps)))
    latent, mean = _numpy_forward(algo, obs)
    ref_a, ref_logp, ref_ent = _sb3_reference(latent, mean, algo.agent.log_std.asnumpy(), eps)
    np.testing.assert_allclose(a, ref_a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(env_a, np.clip(ref_a, -2, 2), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logp, ref_logp, rtol=1e-5, atol=1e-5)
    # the loss: log-prob of the stored actions (ratio 1 -> approx KL 0) and the mean entropy
    loss = PPOLoss(algo.agent, algo.cfg.algo)
    f = lambda x: Tensor(np.asarray(x, np.float32))  # noqa: E731
    out = loss(f(obs), f(a), f(logp), f([1.0, -0.5, 0.2]), f([0.0, 0.0, 0.0]), f(value), f(0.2), f(0.0))
    _, _, _, entropy, approx_kl = (float(o.asnumpy()) for o in out[:5])
    assert entropy == pytest.approx(float(ref_ent.mean()), rel=1e-5, abs=1e-6)
    assert abs(approx_kl) < 1e-6
    # another action: the loss's log-prob against the reference, through the ratio
    other = ref_a + rng.normal(size=ref_a.shape)
    _, ref_other, _ = _sb3_reference(latent, mean, algo.agent.log_std.asnumpy(), eps, actions=other)
    out = loss(f(obs), f(other), f(ref_other), f([1.0, -0.5, 0.2]), f([0.0, 0.0, 0.0]), f(value), f(0.2), f(0.0))
    assert abs(float(out[4].asnumpy())) < 1e-5  # log pi(other) == the reference's -> ratio 1


def test_matches_sb3_state_dependent_noise_distribution():
    th = pytest.importorskip("torch")
    sb3 = pytest.importorskip("stable_baselines3.common.distributions")
    algo = _algo()
    rng = np.random.default_rng(2)
    obs = rng.normal(size=(3, 3)).astype(np.float32)
    eps = rng.standard_normal((3,) + tuple(algo.agent.log_std.shape)).astype(np.float32)
    _, a, logp, _ = (o.asnumpy() for o in algo.rollout_cell(Tensor(obs), Tensor(eps)))
    latent, mean = _numpy_forward(algo, obs)
    log_std = th.tensor(algo.agent.log_std.asnumpy(), dtype=th.float64)
    dist = sb3.StateDependentNoiseDistribution(1)  # SB3's PPO defaults: full_std, exp, no learned features
    dist.latent_sde_dim = latent.shape[1]
    dist.exploration_matrices = th.exp(log_std) * th.tensor(eps, dtype=th.float64)  # sample_weights' rsample
    dist.exploration_mat = dist.exploration_matrices[0]
    dist.proba_distribution(th.tensor(mean), log_std, th.tensor(latent))
    actions = dist.sample()
    np.testing.assert_allclose(a, actions.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logp, dist.log_prob(actions).numpy(), rtol=1e-5, atol=1e-5)


def test_exploration_matrices_drawn_at_rollout_start_and_every_sde_sample_freq():
    algo = _algo(["algo.sde_sample_freq=4"])
    state = algo.rng.bit_generator.state
    draws = [algo.step_noise(t, 3).copy() for t in range(10)]
    ref = np.random.default_rng()
    ref.bit_generator.state = state
    shape = (3, 5, 1)
    expected = [ref.standard_normal(shape).astype(np.float32) for _ in range(3)]  # t = 0, 4, 8
    for t, d in enumerate(draws):
        np.testing.assert_array_equal(d, expected[t // 4])
    assert algo.rng.bit_generator.state == ref.bit_generator.state
    once = _algo(["algo.sde_sample_freq=-1"])  # only at each rollout's start
    first = [once.step_noise(t, 3).copy() for t in range(6)]
    assert all(np.array_equal(first[0], d) for d in first)
    assert not np.array_equal(once.step_noise(0, 3), first[0])  # the next rollout draws anew


def test_without_sde_step_noise_is_the_per_step_gaussian():
    cfg = load_config(GSDE, SMALL + ["algo.use_sde=false"])
    algo = registry.get("ppo")(cfg)
    assert tuple(algo.agent.log_std.shape) == (1,)
    state = algo.rng.bit_generator.state
    got = [algo.step_noise(t, 3) for t in range(3)]
    ref = np.random.default_rng()
    ref.bit_generator.state = state
    for g in got:
        np.testing.assert_array_equal(g, ref.standard_normal((3, 1)).astype(np.float32))


def test_use_sde_with_discrete_actions_is_a_config_error(tmp_path, capsys):
    cfg = load_config(os.path.join(CONFIGS, "ppo", "CartPole-v1.yaml"), ["algo.use_sde=true"])
    with pytest.raises(ConfigError, match=r"key 'algo.use_sde'.*Box.*Discrete\(2\)"):
        registry.get("ppo")(cfg)
    rc = main(["train", os.path.join(CONFIGS, "ppo", "CartPole-v1.yaml"), "--run-dir", str(tmp_path / "r"),
               "--set", "algo.use_sde=true", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "algo.use_sde" in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["0", "-2"])
def test_sde_sample_freq_range(value):
    with pytest.raises(ConfigError, match=r"sde_sample_freq.*-1 \(only at the start of each rollout\) or a positive"):
        load_config(GSDE, [f"algo.sde_sample_freq={value}"])
    with pytest.raises(ConfigError, match=r"use_sde.*expected bool"):
        load_config(GSDE, ["algo.use_sde=3"])


def test_latent_features_are_detached_in_the_variance():
    # Only the entropy term (zero advantages, vf_coef 0): with the latent detached, as SB3's
    # learn_features=False, no gradient reaches the actor trunk; log_std gets
    # d mean_n sum_a log sigma / d log_std[l, a] = mean_n latent_nl^2 std_la^2 / sigma_na^2.
    from mindspore import nn, ops

    algo = _algo(["algo.ent_coef=0.5", "algo.vf_coef=0.0"])
    loss = PPOLoss(algo.agent, algo.cfg.algo)
    params = algo.agent.trainable_params()

    class Grads(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fn = ops.value_and_grad(loss, None, params, has_aux=True)

        def construct(self, *args):
            return self.fn(*args)[1]

    rng = np.random.default_rng(3)
    obs = rng.normal(size=(6, 3)).astype(np.float32)
    acts = rng.normal(size=(6, 1)).astype(np.float32)
    f = lambda x: Tensor(np.asarray(x, np.float32))  # noqa: E731
    grads = Grads()(f(obs), f(acts), f(np.zeros(6)), f(np.zeros(6)), f(np.zeros(6)), f(np.zeros(6)), f(0.2), f(0.0))
    by_name = {p.name: g.asnumpy() for p, g in zip(params, grads)}
    trunk = [p.name for p in algo.agent.actor.first.trainable_params()]
    assert trunk and all(np.all(by_name[n] == 0) for n in trunk)
    latent, _ = _numpy_forward(algo, obs)
    std = np.exp(algo.agent.log_std.asnumpy().astype(np.float64))
    sigma2 = latent ** 2 @ std ** 2 + EPS
    expected = -0.5 * np.mean(latent[:, :, None] ** 2 * std[None] ** 2 / sigma2[:, None, :], axis=0)
    np.testing.assert_allclose(by_name[algo.agent.log_std.name], expected, rtol=1e-4, atol=1e-7)


class _IndexToBox(gym.Env):
    """A Discrete observation with a Box action: gSDE's features would sit behind the one-hot encoder."""
    observation_space = gym.spaces.Discrete(4)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, 0.0, True, False, {}


def test_use_sde_with_non_box_observations_is_a_config_error():
    if "MsrlTestIndexToBox-v0" not in gym.registry:
        gym.register("MsrlTestIndexToBox-v0", entry_point=_IndexToBox)
    cfg = load_config(GSDE, ["env.id=MsrlTestIndexToBox-v0", "env.normalize_obs=false", "env.n_envs=1"])
    with pytest.raises(ConfigError, match=r"key 'algo.use_sde'.*Box observations.*Discrete observations"):
        registry.get("ppo")(cfg)
