"""GAE against hand-computed values, with a truncated and a terminated episode."""
import numpy as np
import pytest

from msrl_consistent.buffers import RolloutBuffer, compute_gae


def hand_gae(rewards, values, next_values, terminated, dones, gamma, lam):
    T = len(rewards)
    adv = [0.0] * T
    last = 0.0
    for t in reversed(range(T)):
        delta = rewards[t] + gamma * (0.0 if terminated[t] else next_values[t]) - values[t]
        last = delta + gamma * lam * (0.0 if dones[t] else last)
        adv[t] = last
    return adv


def test_gae_truncated_and_terminated_single_env():
    gamma, lam = 0.9, 0.8
    # Steps 0-1: episode A ends by truncation at t=1 (bootstrap from V(final obs) = 5.0).
    # Steps 2-3: episode B terminates at t=3 (no bootstrap). Step 4: episode C continues
    # past the rollout (bootstrap from the last value 2.0).
    rewards = np.array([[1.0], [1.0], [0.5], [2.0], [1.0]], np.float32)
    values = np.array([[0.5], [0.4], [0.3], [0.2], [0.1]], np.float32)
    next_values = np.array([[0.4], [5.0], [0.2], [99.0], [2.0]], np.float32)  # 99 must be ignored
    terminated = np.array([[0], [0], [0], [1], [0]], bool)
    truncated = np.array([[0], [1], [0], [0], [0]], bool)
    dones = terminated | truncated
    adv, ret = compute_gae(rewards, values, next_values, terminated, dones, gamma, lam)
    # by hand:
    d4 = 1.0 + 0.9 * 2.0 - 0.1            # 2.7
    d3 = 2.0 + 0.0 - 0.2                  # 1.8 (terminated)
    d2 = 0.5 + 0.9 * 0.2 - 0.3            # 0.38
    d1 = 1.0 + 0.9 * 5.0 - 0.4            # 5.1 (truncated: bootstrap from final obs)
    d0 = 1.0 + 0.9 * 0.4 - 0.5            # 0.86
    a4 = d4
    a3 = d3                                # recursion cut at episode end
    a2 = d2 + 0.72 * a3
    a1 = d1                                # recursion cut at truncation
    a0 = d0 + 0.72 * a1
    expected = np.array([a0, a1, a2, a3, a4])
    np.testing.assert_allclose(adv[:, 0], expected, rtol=1e-6)
    np.testing.assert_allclose(ret[:, 0], expected + values[:, 0], rtol=1e-6)
    np.testing.assert_allclose(adv[:, 0], hand_gae(rewards[:, 0], values[:, 0], next_values[:, 0],
                                                   terminated[:, 0], dones[:, 0], gamma, lam), rtol=1e-6)


def test_rollout_buffer_uses_final_values_only_for_truncation():
    buf = RolloutBuffer(n_steps=3, n_envs=2, obs_dim=1, act_shape=(), discrete=True)
    z = np.zeros((2, 1), np.float32)
    a = np.zeros(2, np.int32)
    # env 0: truncated at t=0, env 1: terminated at t=1
    buf.add(z, a, np.zeros(2), np.array([1.0, 2.0]), np.array([1.0, 1.0]), np.array([False, False]), np.array([True, False]))
    buf.set_final_values(0, np.array([0]), np.array([10.0]))
    buf.add(z, a, np.zeros(2), np.array([3.0, 4.0]), np.array([1.0, 1.0]), np.array([False, True]), np.array([False, False]))
    buf.add(z, a, np.zeros(2), np.array([5.0, 6.0]), np.array([1.0, 1.0]), np.array([False, False]), np.array([False, False]))
    gamma, lam = 0.5, 1.0
    buf.compute(last_values=np.array([7.0, 8.0], np.float32), gamma=gamma, gae_lambda=lam)
    for i in range(2):
        nv = np.append(buf.values[1:, i], [7.0, 8.0][i])
        dones = buf.terminated[:, i] | buf.truncated[:, i]
        nv = np.where(dones, buf.final_values[:, i], nv)
        expected = hand_gae(buf.rewards[:, i], buf.values[:, i], nv, buf.terminated[:, i], dones, gamma, lam)
        np.testing.assert_allclose(buf.advantages[:, i], expected, rtol=1e-6)
    # env 0, t=0 bootstraps from the final value 10, not from the next rollout value 3
    assert buf.advantages[0, 0] == pytest.approx(1.0 + 0.5 * 10.0 - 1.0)
    # env 1, t=1 terminated: no bootstrap
    assert buf.advantages[1, 1] == pytest.approx(1.0 - 4.0)
