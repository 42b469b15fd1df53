"""Observation normalization that lives inside the policy cell.

The statistics the graph uses are non-trainable Parameters of :class:`ObsNormalizer`, so
they are checkpointed and exported with the cell (never left outside the model). The host
keeps the exact running statistics in float64 (:class:`RunningMeanStd`, Welford/Chan
parallel update, as Stable-Baselines3's VecNormalize) and pushes float32 copies into the
Parameters between graph calls. During one rollout + update the observation statistics are
frozen, so the log-probabilities recorded at collection time are the ones the update recomputes.
"""
from __future__ import annotations

import numpy as np
from mindspore import Parameter, Tensor, nn, ops


class RunningMeanStd:
    """Exact parallel mean/variance update (Chan et al. 1979), float64 on the host."""

    def __init__(self, shape, epsilon: float = 1e-4):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = float(epsilon)

    def update(self, batch: np.ndarray) -> None:
        batch = np.asarray(batch, np.float64).reshape(-1, *self.mean.shape)
        b_mean, b_var, b_count = batch.mean(0), batch.var(0), batch.shape[0]
        delta = b_mean - self.mean
        tot = self.count + b_count
        new_mean = self.mean + delta * b_count / tot
        m2 = self.var * self.count + b_var * b_count + delta ** 2 * self.count * b_count / tot
        self.mean, self.var, self.count = new_mean, m2 / tot, tot

    def state(self) -> dict:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": np.array([self.count], np.float64)}

    def load(self, state: dict) -> None:
        self.mean = np.array(state["mean"], np.float64)
        self.var = np.array(state["var"], np.float64)
        self.count = float(np.asarray(state["count"]).ravel()[0])


class RewardNormalizer:
    """Reward scaling as Stable-Baselines3's VecNormalize(norm_reward=True): at every vector step the
    discounted return ``R <- gamma * R + r`` (reset at episode ends) updates the running variance,
    then the rewards are divided by its standard deviation and clipped to [-clip, clip] (so the
    first rollout is scaled too). Host-side only: the policy cell and so the export never see it
    (a deployed policy acts on observations, not rewards).

    ``gather`` (data-parallel runs) stacks every rank's returns of the step in rank order, so all
    ranks update with the same values and keep identical statistics; in one process it is the
    identity and the statistics match VecNormalize's to float64 rounding."""

    def __init__(self, n_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8, gather=None):
        self.rms = RunningMeanStd(())
        self.gamma, self.clip, self.eps = float(gamma), float(clip), float(eps)
        self.returns = np.zeros(n_envs, np.float64)
        self.gather = gather

    def step(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        """The scaled rewards (float32) of one vector step, after updating the statistics with it."""
        self.returns = self.returns * self.gamma + rewards
        self.rms.update(self.returns if self.gather is None else self.gather(self.returns).reshape(-1))
        scaled = np.clip(rewards / np.sqrt(self.rms.var + self.eps), -self.clip, self.clip)
        self.returns[np.asarray(dones, bool)] = 0.0
        return scaled.astype(np.float32)

    def state(self) -> dict:
        return self.rms.state()

    def load(self, state: dict) -> None:
        self.rms.load(state)


class ObsNormalizer(nn.Cell):
    """``clip((obs - mean) / sqrt(var + eps), -clip, clip)``; identity when disabled."""

    def __init__(self, obs_dim: int, enabled: bool, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.enabled = bool(enabled)
        self.clip = float(clip)
        self.eps = float(eps)
        self.mean = Parameter(Tensor(np.zeros(obs_dim, np.float32)), name="mean", requires_grad=False)
        self.var = Parameter(Tensor(np.ones(obs_dim, np.float32)), name="var", requires_grad=False)

    def construct(self, obs):
        if self.enabled:
            x = (obs - self.mean) / ops.sqrt(self.var + self.eps)
            return ops.clip_by_value(x, -self.clip, self.clip)
        return obs

    def set_stats(self, rms: RunningMeanStd) -> None:
        """Write the statistics in place: MindSpore 2.10 graphs that contain a loop (PPO's fused
        update phase) keep reading a Parameter's old buffer after ``set_data`` (measured), while
        an in-place copy is seen by every graph."""
        self.mean.copy_(Tensor(rms.mean.astype(np.float32)))
        self.var.copy_(Tensor(rms.var.astype(np.float32)))
