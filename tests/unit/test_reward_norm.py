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
    rng = np.random.default_rng(0)
    gamma, clip, eps = 0.9, 5.0, 1e-8
    norm = RewardNormalizer(3, gamma, clip, eps)
    ref_rms, ref_ret = RunningMeanStd(()), np.zeros(3)
    for _rollout in range(4):
        rets = []
        for _ in range(16):
            r = rng.normal(3.0, 2.0, 3)
            done = rng.random(3) < 0.1
            scaled, ret = norm.step(r, done)
            ref_ret = ref_ret * gamma + r  # VecNormalize: returns = returns * gamma + reward
            want = np.clip(r / np.sqrt(ref_rms.var + eps), -clip, clip)  # normalize_reward
            np.testing.assert_allclose(scaled, want.astype(np.float32), rtol=1e-6)
            np.testing.assert_array_equal(ret, ref_ret)
            rets.append(ref_ret.copy())
            ref_ret[done] = 0.0  # returns[dones] = 0
        norm.rms.update(np.asarray(rets).reshape(-1))  # frozen during a rollout, updated after
        ref_rms.update(np.asarray(rets).reshape(-1))
    assert ref_rms.var > 1.0  # the scale is not trivial


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
