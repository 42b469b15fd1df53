"""Rollout buffer with GAE(lambda), and a preallocated circular replay buffer.

Transitions never span two episodes: for step t of env i the buffer stores the value of
the *true* next state (`next_values`): V(s_{t+1}) inside an episode, V(final_obs) for a
truncated episode (bootstrap), and nothing for a terminated one (masked by `terminated`).
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np


def compute_gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray,
                terminated: np.ndarray, dones: np.ndarray, gamma: float, gae_lambda: float):
    """Generalized Advantage Estimation (Schulman et al. 2016), arrays shaped (T, n_envs).

    delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}
    where done_t = terminated_t or truncated_t: the advantage recursion stops at every
    episode end, while bootstrapping stops only at termination.
    Returns (advantages, returns = advantages + values), float32.
    """
    T = rewards.shape[0]
    adv = np.zeros_like(rewards, dtype=np.float64)
    last = np.zeros(rewards.shape[1:], np.float64)
    not_term = 1.0 - terminated.astype(np.float64)
    not_done = 1.0 - dones.astype(np.float64)
    for t in range(T - 1, -1, -1):
        delta = rewards[t] + gamma * not_term[t] * next_values[t] - values[t]
        last = delta + gamma * gae_lambda * not_done[t] * last
        adv[t] = last
    adv32 = adv.astype(np.float32)
    return adv32, (adv + values).astype(np.float32)


class RolloutBuffer:
    """On-policy storage for n_steps x n_envs transitions (preallocated float32)."""

    def __init__(self, n_steps: int, n_envs: int, obs_dim: int, act_shape: tuple, discrete: bool):
        self.n_steps, self.n_envs = n_steps, n_envs
        self.obs = np.zeros((n_steps, n_envs, obs_dim), np.float32)
        self.actions = np.zeros((n_steps, n_envs) + act_shape, np.int32 if discrete else np.float32)
        self.log_probs = np.zeros((n_steps, n_envs), np.float32)
        self.values = np.zeros((n_steps, n_envs), np.float32)
        self.rewards = np.zeros((n_steps, n_envs), np.float32)
        self.terminated = np.zeros((n_steps, n_envs), bool)
        self.truncated = np.zeros((n_steps, n_envs), bool)
        self.final_values = np.zeros((n_steps, n_envs), np.float32)  # V(final_obs) where truncated
        self.pos = 0

    def add(self, obs, actions, log_probs, values, rewards, terminated, truncated):
        t = self.pos
        self.obs[t], self.actions[t], self.log_probs[t], self.values[t] = obs, actions, log_probs, values
        self.rewards[t], self.terminated[t], self.truncated[t] = rewards, terminated, truncated
        self.final_values[t] = 0.0
        self.pos += 1

    def set_final_values(self, t: int, env_idx: np.ndarray, values: np.ndarray) -> None:
        self.final_values[t, env_idx] = values

    def compute(self, last_values: np.ndarray, gamma: float, gae_lambda: float):
        """Fill advantages and returns; ``last_values`` = V(obs after the last step)."""
        dones = self.terminated | self.truncated
        next_values = np.concatenate([self.values[1:], last_values[None]], axis=0)
        next_values = np.where(dones, self.final_values, next_values)
        self.advantages, self.returns = compute_gae(
            self.rewards, self.values, next_values, self.terminated, dones, gamma, gae_lambda)

    def flat(self) -> Dict[str, np.ndarray]:
        n = self.n_steps * self.n_envs
        return {
            "obs": self.obs.reshape(n, -1),
            "actions": self.actions.reshape((n,) + self.actions.shape[2:]),
            "log_probs": self.log_probs.reshape(n),
            "values": self.values.reshape(n),
            "advantages": self.advantages.reshape(n),
            "returns": self.returns.reshape(n),
        }

    def reset(self):
        self.pos = 0


class ReplayBuffer:
    """Circular replay buffer of preallocated float32 arrays, sampled with a given Generator.

    ``terminated`` is stored apart from truncation: a truncated transition keeps
    ``terminated = False`` and so bootstraps from its (true final) next observation.

    ``memory_lean=True`` does not keep next observations twice: ``next_obs[i]`` is read
    from ``obs[i + n_envs]`` (the next row of the same env), and only the next observations
    that differ from it (the true final observation of an ended episode) are kept, in a
    small side table keyed by slot. The newest ``n_envs`` slots have no successor yet and
    are never sampled.
    """

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, n_envs: int = 1, memory_lean: bool = False):
        if capacity % n_envs:
            capacity -= capacity % n_envs
        self.capacity, self.n_envs, self.memory_lean = capacity, n_envs, memory_lean
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.next_obs = None if memory_lean else np.zeros((capacity, obs_dim), np.float32)
        self.final_obs: Dict[int, np.ndarray] = {}
        self.actions = np.zeros((capacity, act_dim), np.float32)
        self.rewards = np.zeros((capacity,), np.float32)
        self.terminated = np.zeros((capacity,), np.float32)
        self.ended = np.zeros((capacity,), bool)
        self.pos = 0
        self.full = False

    @property
    def size(self) -> int:
        return self.capacity if self.full else self.pos

    def add(self, obs, next_obs, actions, rewards, terminated, truncated) -> None:
        """Add one vector step: arrays with a leading n_envs axis."""
        n = self.n_envs
        sl = slice(self.pos, self.pos + n)
        self.obs[sl] = obs
        self.actions[sl] = actions
        self.rewards[sl] = rewards
        self.terminated[sl] = terminated
        ended = np.asarray(terminated, bool) | np.asarray(truncated, bool)
        self.ended[sl] = ended
        if self.memory_lean:
            for i in range(n):
                self.final_obs.pop(self.pos + i, None)
                if ended[i]:
                    self.final_obs[self.pos + i] = np.array(next_obs[i], np.float32)
        else:
            self.next_obs[sl] = next_obs
        self.pos += n
        if self.pos >= self.capacity:
            self.full, self.pos = True, 0

    def _valid_count(self) -> int:
        return self.size - (self.n_envs if self.memory_lean else 0)

    def sample(self, batch_size: int, rng: np.random.Generator) -> Dict[str, np.ndarray]:
        valid = self._valid_count()
        if valid <= 0:
            raise ValueError("replay buffer has no complete transition to sample yet")
        if self.memory_lean and self.full:
            # slots [pos, pos+n) are the oldest; the newest n (just before pos) have no successor
            start = self.pos
            idx = (start + rng.integers(0, valid, size=batch_size)) % self.capacity
        else:
            idx = rng.integers(0, valid, size=batch_size)
        out = {"obs": self.obs[idx], "actions": self.actions[idx], "rewards": self.rewards[idx],
               "terminated": self.terminated[idx]}
        if self.memory_lean:
            nxt = self.obs[(idx + self.n_envs) % self.capacity]
            for j in np.nonzero(self.ended[idx])[0]:
                nxt[j] = self.final_obs[int(idx[j])]
            out["next_obs"] = nxt
        else:
            out["next_obs"] = self.next_obs[idx]
        return out

    def nbytes(self) -> int:
        arrays = [self.obs, self.actions, self.rewards, self.terminated, self.ended]
        if self.next_obs is not None:
            arrays.append(self.next_obs)
        return int(sum(a.nbytes for a in arrays) + sum(v.nbytes for v in self.final_obs.values()))

    def state(self) -> Dict[str, np.ndarray]:
        d = {"obs": self.obs, "actions": self.actions, "rewards": self.rewards,
             "terminated": self.terminated, "ended": self.ended,
             "pos_full": np.array([self.pos, int(self.full)], np.int64)}
        if self.next_obs is not None:
            d["next_obs"] = self.next_obs
        if self.final_obs:
            keys = sorted(self.final_obs)
            d["final_keys"] = np.array(keys, np.int64)
            d["final_obs"] = np.stack([self.final_obs[k] for k in keys])
        return d

    def load(self, d: Dict[str, np.ndarray]) -> None:
        self.obs[...] = d["obs"]
        self.actions[...] = d["actions"]
        self.rewards[...] = d["rewards"]
        self.terminated[...] = d["terminated"]
        self.ended[...] = d["ended"]
        self.pos, full = (int(x) for x in d["pos_full"])
        self.full = bool(full)
        if self.next_obs is not None:
            self.next_obs[...] = d["next_obs"]
        self.final_obs = {}
        if "final_keys" in d:
            for k, v in zip(d["final_keys"], d["final_obs"]):
                self.final_obs[int(k)] = np.array(v, np.float32)
