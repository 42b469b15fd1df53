"""Graph cells reused by several algorithms, each serving one run and a population alike (a
population's networks carry a leading member axis, networks.stacked.MembersView): an update
followed by the acting cell in one call, the ranks' mean gradient, gradient-norm clipping, the
Polyak update, the twin critics' Parameters and loss, SAC's squashed-Gaussian sampler and TD3's
target policy smoothing."""
from __future__ import annotations

from typing import Optional

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from msrl_consistent.distributions import rows_mean, tanh_gaussian_log_prob
from msrl_consistent.networks.mlp import Tanh


class UpdateThenAct(nn.Cell):
    """One graph: a gradient step (packed batch -> stats), then the exploration action for the
    next observation, read after the step (the observation depends on its stats), so the action
    is the updated policy's (a population's: after the step wrote the members' actors)."""

    def __init__(self, update: nn.Cell, act: nn.Cell):
        super().__init__()
        self.update = update
        self.act = act

    def construct(self, batch, obs, noise):
        stats = self.update(batch)
        return stats, self.act(ops.depend(obs, stats), noise)


class RankMean(nn.Cell):
    """Graph code: the mean of a gradient tuple over the data-parallel ranks, so every rank
    applies the same step and the parameters stay identical; with one process (``world`` 1) the
    gradients pass unchanged and the graph holds no collective.

    The tuple travels as one flat vector through one AllReduce (sum, then times 1/world, as
    ``nn.DistributedGradReducer`` computes the mean): a collective's fixed cost on CPU is far
    above its arithmetic at these sizes: one per tensor made a small SAC step several times slower
    (docs/benchmarks.md)."""

    def __init__(self, parameters, world: int):
        super().__init__()
        self.distributed = world > 1
        if self.distributed:
            self.allreduce = ops.AllReduce()
            self.shapes = tuple(tuple(p.shape) for p in parameters)
            self.sizes = tuple(int(np.prod(s)) for s in self.shapes)
            self.scale = 1.0 / world

    def construct(self, grads):
        if not self.distributed:
            return grads
        flat = ops.concat([ops.reshape(g, (-1,)) for g in grads])
        total = self.allreduce(flat) * self.scale
        out = ()
        offset = 0
        for i in range(len(self.sizes)):
            out = out + (ops.reshape(total[offset:offset + self.sizes[i]], self.shapes[i]),)
            offset = offset + self.sizes[i]
        return out


LONG_VECTOR = 200_000
"""MindSpore's CPU ReduceSum sums a whole vector of at least this many elements in parallel blocks
whose size it picks by timing (kReduceSmallVectorSize): not bit-reproducible under varying load."""
NORM_ROWS = 1024
"""GradNormClip's row count for a long gradient vector (< LONG_VECTOR: the final sum is serial)."""


class GradNormClip(nn.Cell):
    """torch's ``clip_grad_norm_`` (what Stable-Baselines3 calls): the global norm of a gradient
    tuple, concatenated into one vector (4 kernels instead of 2 per tensor), and every gradient
    times ``min(max_norm / (norm + 1e-6), 1)``. With ``members``, each member's norm over its own
    slices and ``max_norm`` one value per member."""

    def __init__(self, max_norm, members: Optional[int] = None):
        super().__init__()
        self.k = members
        if members is None:
            self.max_norm = Tensor([float(max_norm)], ms.float32)  # shape (1,), as clip_by_global_norm
        else:
            self.max_norm = Tensor(np.asarray(max_norm, np.float32).reshape((members,)))

    def norm(self, grads):
        """The global norm: shape (1,), or (members,)."""
        if self.k is None:
            sq = ops.square(ops.concat([g.reshape(-1) for g in grads]))
            n = sq.shape[0]
            if n < LONG_VECTOR:  # the CPU ReduceSum's serial path: one fixed summation order
                return ops.sqrt(sq.sum()).reshape((1,))
            # A full ReduceSum of >= 200,000 elements takes the CPU kernel's AccelerateLongVector path:
            # its split into blocks is chosen by ParallelLaunchAutoSearch from measured launch times
            # (after its first 15-30 launches), so the rounding depends on the machine's load. Row sums
            # (each row summed whole by one task, whatever the split) then a short serial sum do not.
            pad = (-n) % NORM_ROWS
            if pad:
                sq = ops.concat((sq, ops.zeros((pad,), sq.dtype)))
            return ops.sqrt(sq.reshape((NORM_ROWS, -1)).sum(1).sum()).reshape((1,))
        return ops.sqrt(ops.square(ops.concat([g.reshape((self.k, -1)) for g in grads], 1)).sum(1))

    def construct(self, grads, norm):
        coef = ops.minimum(self.max_norm / (norm + 1e-6), 1.0)
        if self.k is None:
            return tuple(g * coef for g in grads)
        return tuple(g * coef.reshape((self.k,) + (1,) * (g.ndim - 1)) for g in grads)


def per_member(value):
    """A coefficient of the off-policy steps: the config's float for one run (or for members that
    share it: the single run's arithmetic), else a Tensor of the members' values shaped
    (members, 1), broadcast over their rows (a sweep)."""
    values = np.asarray(value, np.float64).reshape(-1)
    if np.all(values == values[0]):
        return float(values[0])
    return Tensor(values.astype(np.float32).reshape(-1, 1))


def polyak(targets, onlines, tau, ready):
    """Graph code: target <- (1 - tau) * target + tau * online for each Parameter pair, reading
    the online Parameters after ``ready`` (the output of their optimizer step); ``tau`` a float,
    or one value per member (members, 1) for stacked Parameters."""
    for t, o in zip(targets, onlines):
        rate = tau if isinstance(tau, float) else tau.reshape((-1,) + (1,) * (t.ndim - 1))
        ops.assign_add(t, rate * (ops.depend(o, ready) - t))  # bit-identical to Lerp, and faster on CPU
    return ready


def twin_critic_params(agent, targets: bool = False) -> list:
    """The Parameters of ``q1`` then ``q2`` (or of their target copies), in a fixed order."""
    q1, q2 = (agent.q1_target, agent.q2_target) if targets else (agent.q1, agent.q2)
    return list(q1.get_parameters()) + list(q2.get_parameters())


def total(loss):
    """What a gradient differentiates: one run's loss, or the sum of the members' losses (whose
    gradient is each member's gradient of its own loss)."""
    return loss if loss.ndim == 0 else loss.sum()


class TwinCriticLoss(nn.Cell):
    """``scale * (MSE(Q1(s, a), y) + MSE(Q2(s, a), y))`` over the twin critics -> (total, the loss,
    mean Q1 for logging); one per member for a population's (members, rows) inputs.
    Stable-Baselines3 uses scale 0.5 in SAC and 1.0 in TD3."""

    def __init__(self, agent, scale: float):
        super().__init__()
        self.agent = agent
        self.scale = float(scale)

    def construct(self, x, actions, y):
        q1 = self.agent.q1(x, actions)
        q2 = self.agent.q2(x, actions)
        loss = self.scale * (rows_mean((q1 - y) ** 2) + rows_mean((q2 - y) ** 2))
        return total(loss), ops.stop_gradient(loss), ops.stop_gradient(rows_mean(q1))


class SquashedGaussian(nn.Cell):
    """(normalized obs, standard-normal noise) -> (u, log pi(tanh(u))), u = mean + std * noise.

    The log-std head is clamped to [LOG_STD_MIN, LOG_STD_MAX] = [-20, 2] (as SB3)."""

    def __init__(self, agent):
        super().__init__()
        self.agent = agent
        self.lo, self.hi = agent.LOG_STD_MIN, agent.LOG_STD_MAX

    def construct(self, x, noise):
        h = self.agent.actor.first(x)
        mean = self.agent.actor.second(h)
        log_std = ops.clip_by_value(self.agent.log_std_head(h), self.lo, self.hi)
        u = mean + ops.exp(log_std) * noise
        return u, tanh_gaussian_log_prob(mean, log_std, u)


class TargetPolicySmoothing(nn.Cell):
    """a' = clip(tanh(u') + clip(sigma * eps, -c, c), -1, 1), eps ~ N(0, 1) from the host."""

    def __init__(self, sigma: float, noise_clip: float):
        super().__init__()
        self.sigma, self.noise_clip = float(sigma), float(noise_clip)
        self.tanh = Tanh(pow=True)

    def construct(self, u, eps):
        noise = ops.clip_by_value(self.sigma * eps, -self.noise_clip, self.noise_clip)
        return ops.clip_by_value(self.tanh(u) + noise, -1.0, 1.0)
