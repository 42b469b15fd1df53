"""Reward normalization against Stable-Baselines3's VecNormalize formulas (NumPy reference), and
through training: stored in checkpoints, restored on resume, never part of the exported cell."""
import os

import numpy as np
import pytest
from helpers import CONFIGS

from msrl_consistent import checkpoint as ckpt
from msrl_consistent import registry
from msrl_consistent.config import ConfigError, load_config
from msrl_consistent.normalization import RewardNormalizer, RunningMeanStd


def test_scaled_rewards_follow_vecnormalize():
    # Stable-Baselines3's VecNormalize.step_wait, step by step: returns = returns * gamma + reward,
    # ret_rms.update(returns), reward / sqrt(ret_rms.var + eps) clipped, returns[dones] = 0
    rng = np.random.default_rng(0)
    gamma, clip, eps = 0.9, 5.0, 1e-8
    norm = RewardNormalizer(3, gamma, clip, eps)
    ref_rms, ref_ret = RunningMeanStd(()), np.zeros(3)
    for t in range(64):
        r = rng.normal(3.0, 2.0, 3)
        done = rng.random(3) < 0.1
        scaled = norm.step(r, done)
        ref_ret = ref_ret * gamma + r
        ref_rms.update(ref_ret)
        want = np.clip(r / np.sqrt(ref_rms.var + eps), -clip, clip)
        np.testing.assert_allclose(scaled, want.astype(np.float32), rtol=1e-6)
        if t == 0:  # the very first step is scaled already (by the first returns' spread)
            assert not np.allclose(scaled, np.clip(r, -clip, clip).astype(np.float32))
        ref_ret[done] = 0.0
        np.testing.assert_array_equal(norm.returns, ref_ret)
    assert norm.rms.var == ref_rms.var and norm.rms.count == ref_rms.count
    assert ref_rms.var > 1.0  # the scale is not trivial


def test_ranks_update_with_every_ranks_returns_in_rank_order():
    # data-parallel: each rank's normalizer is fed the gathered returns of all ranks, so the
    # statistics stay identical on every rank
    rng = np.random.default_rng(1)
    steps = [(rng.normal(size=(2, 3)), rng.random((2, 3)) < 0.2) for _ in range(20)]
    ranks = [RewardNormalizer(3, 0.99), RewardNormalizer(3, 0.99)]
    single = RewardNormalizer(6, 0.99)
    for r, d in steps:
        # what Dist.allgather returns on every rank: this step's returns of rank 0 and 1, float32
        gathered = np.stack([n.returns * n.gamma + r[i] for i, n in enumerate(ranks)]).astype(np.float32)
        for i, n in enumerate(ranks):
            n.gather = lambda _ret, g=gathered: g
            n.step(r[i], d[i])
        single.step(r.reshape(-1), d.reshape(-1))
    assert ranks[0].rms.var == ranks[1].rms.var and ranks[0].rms.count == ranks[1].rms.count == 1e-4 + 6 * 20
    np.testing.assert_allclose(ranks[0].rms.var, single.rms.var, rtol=1e-5)  # float32 through the gather


@pytest.mark.slow
def test_ppo_with_reward_normalization_checkpoints_and_exports_without_it(tmp_path):
    over = ["total_timesteps=1024", "eval.freq=0", "eval.episodes=1", "log.tensorboard=false",
            "checkpoint.freq=512"]
    cfg = load_config(os.path.join(CONFIGS, "ppo/CartPole-v1.yaml"), over + ["env.normalize_reward=true"])
    algo = registry.get("ppo")(cfg)
    algo.learn(str(tmp_path / "n"), progress=False)
    tensors, _ = ckpt.load_checkpoint(str(tmp_path / "n" / "checkpoints" / "final.safetensors"))
    assert float(tensors["host/ret_rms/var"].ravel()[0]) != 1.0 and float(tensors["host/ret_rms/count"][0]) > 1000
    resumed = registry.get("ppo").resume(str(tmp_path / "n"))
    assert resumed.reward_norm is not None
    assert float(resumed.reward_norm.rms.var.ravel()[0]) == float(tensors["host/ret_rms/var"].ravel()[0])
    plain = registry.get("ppo")(load_config(os.path.join(CONFIGS, "ppo/CartPole-v1.yaml"), over))
    assert set(algo.parameters()) == set(plain.parameters())  # nothing of it in the agent / policy cell
    plain.learn(str(tmp_path / "p"), progress=False)
    assert algo.params_hash() != plain.params_hash()  # it does change what PPO learns


def test_off_policy_refuses_reward_normalization():
    cfg = load_config(os.path.join(CONFIGS, "sac/Pendulum-v1.yaml"), ["env.normalize_reward=true"])
    with pytest.raises(ConfigError, match="normalize_reward"):
        registry.get("sac")(cfg)


def test_scaled_rewards_equal_stable_baselines3_vecnormalize():
    # with the bench extra installed: SB3's own VecNormalize fed the same rewards and dones
    pytest.importorskip("stable_baselines3")
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    rng = np.random.default_rng(3)
    n, steps, gamma = 4, 300, 0.99
    rewards = rng.normal(-6.0, 4.0, (steps, n))  # Pendulum-like: negative, std of the return ~ tens
    dones = rng.random((steps, n)) < 0.01

    class Scripted(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def __init__(self, i):
            self.i, self.t = i, 0

        def reset(self, seed=None, options=None):
            return np.zeros(1, np.float32), {}

        def step(self, action):
            r, d = rewards[self.t, self.i], dones[self.t, self.i]
            self.t += 1
            return np.zeros(1, np.float32), float(r), bool(d), False, {}

    venv = VecNormalize(DummyVecEnv([lambda i=i: Scripted(i) for i in range(n)]), norm_obs=False, gamma=gamma)
    venv.reset()
    ours = RewardNormalizer(n, gamma, 10.0, 1e-8)
    worst = 0.0
    for t in range(steps):
        _, sb3_scaled, _, _ = venv.step(np.zeros(n, np.int64))
        worst = max(worst, float(np.abs(ours.step(rewards[t], dones[t]) - sb3_scaled).max()))
    print(f"largest difference from VecNormalize: {worst:.3g}")
    assert worst <= 1e-6, worst  # float32 rounding of the scaled rewards only
    np.testing.assert_allclose(ours.rms.var, venv.ret_rms.var, rtol=1e-8)  # DummyVecEnv keeps rewards in float32
