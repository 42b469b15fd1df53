"""Rollout buffer with GAE(lambda), and a preallocated circular replay buffer.

Transitions never span two episodes: for step t of env i the buffer stores the value of
the *true* next state (`next_values`): V(s_{t+1}) inside an episode, V(final_obs) for a
truncated episode (bootstrap), and nothing for a terminated one (masked by `terminated`).
"""
from __future__ import annotations

from typing import Dict, Union

import numpy as np

Rate = Union[float, np.ndarray]
"""A discount or GAE lambda: one value, or one per env column (a population's members)."""


def compute_gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray,
                terminated: np.ndarray, dones: np.ndarray, gamma: Rate, gae_lambda: Rate):
    """Generalized Advantage Estimation (Schulman et al. 2016), arrays shaped (T, n_envs);
    ``gamma`` and ``gae_lambda`` are floats or (n_envs,) arrays.

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

    def __init__(self, n_steps: int, n_envs: int, obs_dim: int, act_shape: tuple, discrete: bool,
                 obs_dtype=np.float32):
        self.n_steps, self.n_envs = n_steps, n_envs
        # uint8 for image observations: the raw frames, as the policy cell takes them (4x less memory)
        self.obs = np.zeros((n_steps, n_envs, obs_dim), obs_dtype)
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

    def compute(self, last_values: np.ndarray, gamma: Rate, gae_lambda: Rate):
        """Fill advantages and returns; ``last_values`` = V(obs after the last step)."""
        dones = self.terminated | self.truncated
        next_values = np.concatenate([self.values[1:], last_values[None]], axis=0)
        next_values = np.where(dones, self.final_values, next_values)
        self.advantages, self.returns = compute_gae(
            self.rewards, self.values, next_values, self.terminated, dones, gamma, gae_lambda)

    def by_step(self) -> Dict[str, np.ndarray]:
        """The arrays the update takes, each (n_steps, n_envs, ...)."""
        return {"obs": self.obs, "actions": self.actions, "log_probs": self.log_probs, "values": self.values,
                "advantages": self.advantages, "returns": self.returns}

    def flat(self) -> Dict[str, np.ndarray]:
        """``by_step`` with the steps of every env as rows: (n_steps * n_envs, ...), step-major."""
        n = self.n_steps * self.n_envs
        return {k: a.reshape((n,) + a.shape[2:]) for k, a in self.by_step().items()}

    def reset(self):
        self.pos = 0


class ReplayBuffer:
    """Circular replay buffer of preallocated float32 arrays, sampled with a given Generator.

    Rows are written one vector step at a time (``n_envs`` consecutive slots); the capacity
    is rounded down to a multiple of ``n_envs`` so a vector step never wraps.

    ``terminated`` is stored apart from truncation: a truncated transition keeps
    ``terminated = False`` and so bootstraps from its (true final) next observation.

    ``memory_lean=True`` does not keep next observations twice: ``next_obs[i]`` is read
    from ``obs[i + n_envs]`` (the next row of the same env). The next observations that
    differ from it are kept apart: the true final observation of an ended episode (a small
    side table keyed by slot; ``ended`` marks the rows whose next observation is there), the
    next observation of the newest row, which has no successor row yet (``pending_next``,
    n_envs rows), and, after a load (resume: the envs are reseeded), the newest row's next
    observations, moved to the side table. Both modes therefore hold the same transitions and,
    given the same Generator state, return identical samples.
    """

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, n_envs: int = 1, memory_lean: bool = False):
        capacity -= capacity % n_envs
        if capacity <= 0:
            raise ValueError(f"replay buffer capacity must be at least n_envs={n_envs}")
        self.capacity, self.n_envs, self.memory_lean = capacity, n_envs, memory_lean
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.next_obs = None if memory_lean else np.zeros((capacity, obs_dim), np.float32)
        self.pending_next = np.zeros((n_envs, obs_dim), np.float32) if memory_lean else None
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

    def newest(self, n: int):
        """The ``n`` newest observations (oldest first), or None when fewer are stored."""
        if self.size < n:
            return None
        return self.obs[(np.arange(self.pos - n, self.pos)) % self.capacity]

    def add(self, obs, next_obs, actions, rewards, terminated, truncated) -> None:
        """Add one vector step: arrays with a leading n_envs axis. ``next_obs`` must be the
        true next observation (the final one where an episode ended, see envs.step_transitions)."""
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
            self.pending_next[...] = next_obs
        else:
            self.next_obs[sl] = next_obs
        self.pos += n
        if self.pos >= self.capacity:
            self.full, self.pos = True, 0

    def sample(self, batch_size: int, rng: np.random.Generator) -> Dict[str, np.ndarray]:
        """``batch_size`` transitions drawn uniformly (with replacement) from the stored ones."""
        size = self.size
        if size <= 0:
            raise ValueError("replay buffer is empty")
        idx = rng.integers(0, size, size=batch_size)
        out = {"obs": self.obs[idx], "actions": self.actions[idx], "rewards": self.rewards[idx],
               "terminated": self.terminated[idx]}
        if self.memory_lean:
            n = self.n_envs
            nxt = self.obs[(idx + n) % self.capacity]
            newest = (self.pos - n) % self.capacity  # first slot of the newest row
            in_newest = (idx - newest) % self.capacity < n
            if np.any(in_newest):
                nxt[in_newest] = self.pending_next[idx[in_newest] % n]
            for j in np.nonzero(self.ended[idx])[0]:
                nxt[j] = self.final_obs[int(idx[j])]
            out["next_obs"] = nxt
        else:
            out["next_obs"] = self.next_obs[idx]
        return out

    def nbytes(self) -> int:
        """Bytes held by the arrays (the side table of final observations included)."""
        arrays = [self.obs, self.actions, self.rewards, self.terminated, self.ended]
        if self.next_obs is not None:
            arrays.append(self.next_obs)
        if self.pending_next is not None:
            arrays.append(self.pending_next)
        return int(sum(a.nbytes for a in arrays) + sum(v.nbytes for v in self.final_obs.values()))

    def state(self) -> Dict[str, np.ndarray]:
        """The stored transitions (only the filled rows), for a checkpoint."""
        n = self.size
        d = {"obs": self.obs[:n], "actions": self.actions[:n], "rewards": self.rewards[:n],
             "terminated": self.terminated[:n], "ended": self.ended[:n],
             "pos_full": np.array([self.pos, int(self.full), self.capacity, self.n_envs], np.int64)}
        if self.next_obs is not None:
            d["next_obs"] = self.next_obs[:n]
        if self.pending_next is not None:
            d["pending_next"] = self.pending_next
        if self.final_obs:
            keys = sorted(self.final_obs)
            d["final_keys"] = np.array(keys, np.int64)
            d["final_obs"] = np.stack([self.final_obs[k] for k in keys])
        return d

    def load(self, d: Dict[str, np.ndarray]) -> None:
        pos, full, capacity, n_envs = (int(x) for x in d["pos_full"])
        if (capacity, n_envs) != (self.capacity, self.n_envs):
            raise ValueError(f"replay buffer state has capacity {capacity} x {n_envs} envs, "
                             f"this buffer {self.capacity} x {self.n_envs}")
        n = d["obs"].shape[0]
        self.obs[:n] = d["obs"]
        self.actions[:n] = d["actions"]
        self.rewards[:n] = d["rewards"]
        self.terminated[:n] = d["terminated"]
        self.ended[:n] = d["ended"]
        self.pos, self.full = pos, bool(full)
        if self.memory_lean and "next_obs" in d:
            # saved by a normal buffer: rebuild the side tables from the stored next obs
            nxt = d["next_obs"]
            self.final_obs = {int(k): np.array(nxt[k], np.float32) for k in np.nonzero(self.ended[:n])[0]}
            newest = (self.pos - self.n_envs) % self.capacity
            self.pending_next[...] = nxt[newest:newest + self.n_envs]
            self._detach_newest_row()
            return
        if self.next_obs is not None:
            if "next_obs" in d:
                self.next_obs[:n] = d["next_obs"]
            else:  # saved by a lean buffer
                self.next_obs[:n] = self.obs[(np.arange(n) + self.n_envs) % self.capacity]
                newest = (self.pos - self.n_envs) % self.capacity
                self.next_obs[newest:newest + self.n_envs] = d["pending_next"]
        self.final_obs = {}
        if "final_keys" in d:
            for k, v in zip(d["final_keys"], d["final_obs"]):
                self.final_obs[int(k)] = np.array(v, np.float32)
                if self.next_obs is not None:
                    self.next_obs[int(k)] = v
        if self.pending_next is not None and "pending_next" in d:
            self.pending_next[...] = d["pending_next"]
        if self.memory_lean:
            self._detach_newest_row()

    def _detach_newest_row(self) -> None:
        """After a load (a resumed run), the next row is written from reseeded environments, so it
        is not the successor of the newest stored row: keep that row's true next observations
        (``pending_next``) in the side table, as for an ended episode."""
        if self.size == 0:
            return
        newest = (self.pos - self.n_envs) % self.capacity
        for i in range(self.n_envs):
            if not self.ended[newest + i]:
                self.final_obs[newest + i] = np.array(self.pending_next[i], np.float32)
                self.ended[newest + i] = True


class SequenceBuffer(RolloutBuffer):
    """The rollout buffer of a recurrent policy: also each step's episode_start flags and every
    env's state at the first step of each sequence (every ``seq_len`` steps: the rollout's start
    when seq_len is n_steps); ``sequences`` gives the arrays sequence-major."""

    def __init__(self, n_steps: int, n_envs: int, obs_dim: int, act_shape: tuple, discrete: bool, obs_dtype,
                 state_dim: int, seq_len: int = 0):
        super().__init__(n_steps, n_envs, obs_dim, act_shape, discrete, obs_dtype)
        self.seq_len = seq_len or n_steps
        self.episode_starts = np.zeros((n_steps, n_envs), np.float32)
        self.state0 = np.zeros((n_steps // self.seq_len, n_envs, state_dim), np.float32)

    def sequences(self) -> dict:
        """``by_step`` and the episode starts as (sequences, seq_len, ...), env-major (env 0's
        sequences first, in time order), and each sequence's initial state (sequences, state_dim)."""
        arrays = dict(self.by_step(), episode_starts=self.episode_starts)
        k, n_envs = self.state0.shape[0], self.state0.shape[1]

        def cut(a):  # (k * L, n_envs, ...) -> (n_envs * k, L, ...)
            a = a.reshape((k, self.seq_len, n_envs) + a.shape[2:])
            return np.ascontiguousarray(np.moveaxis(a, 2, 0)).reshape((n_envs * k, self.seq_len) + a.shape[3:])
        out = {key: cut(a) for key, a in arrays.items()}
        out["state0"] = np.ascontiguousarray(np.swapaxes(self.state0, 0, 1)).reshape(n_envs * k, -1)
        return out
