"""Graph cells reused by several algorithms (and by their populations): an update followed by the
acting cell in one call, the Polyak update, the twin critics' Parameters and loss, SAC's
squashed-Gaussian sampler and TD3's target policy smoothing."""
from __future__ import annotations

import numpy as np
from mindspore import nn, ops

from msrl_consistent.distributions import tanh_gaussian_log_prob
from msrl_consistent.networks.mlp import Tanh


class UpdateThenAct(nn.Cell):
    """One graph: a gradient step (packed batch -> stats), then the exploration action for the
    next observation. MindSpore orders the acting cell's Parameter reads after the update's
    in-place writes (program order of side effects), so the action is the updated policy's."""

    def __init__(self, update: nn.Cell, act: nn.Cell):
        super().__init__()
        self.update = update
        self.act = act

    def construct(self, batch, obs, noise):
        stats = self.update(batch)
        return stats, self.act(obs, noise)


class RankMean(nn.Cell):
    """Graph code: the mean of a gradient tuple over the data-parallel ranks, so every rank
    applies the same step and the parameters stay identical; with one process (``world`` 1) the
    gradients pass unchanged and the graph holds no collective.

    The tuple travels as one flat vector through one AllReduce (sum, then times 1/world, as
    ``nn.DistributedGradReducer`` computes the mean): a collective's fixed cost on CPU is far
    above its arithmetic at these sizes, and one per tensor made a small SAC step ~10x slower."""

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


def polyak(targets, onlines, tau: float, ready):
    """Graph code: target <- (1 - tau) * target + tau * online for each Parameter pair, reading
    the online Parameters after ``ready`` (the output of their optimizer step)."""
    for t, o in zip(targets, onlines):
        ops.assign_add(t, tau * (ops.depend(o, ready) - t))  # bit-identical to Lerp, ~8x faster on CPU
    return ready


def twin_critic_params(agent, targets: bool = False) -> list:
    """The Parameters of ``q1`` then ``q2`` (or of their target copies), in a fixed order."""
    q1, q2 = (agent.q1_target, agent.q2_target) if targets else (agent.q1, agent.q2)
    return list(q1.get_parameters()) + list(q2.get_parameters())


class TwinCriticLoss(nn.Cell):
    """``scale * (MSE(Q1(s, a), y) + MSE(Q2(s, a), y))`` over the twin critics, and mean Q1 for
    logging. Stable-Baselines3 uses scale 0.5 in SAC and 1.0 in TD3."""

    def __init__(self, agent, scale: float):
        super().__init__()
        self.agent = agent
        self.scale = float(scale)

    def construct(self, x, actions, y):
        q1 = self.agent.q1(x, actions)
        q2 = self.agent.q2(x, actions)
        loss = self.scale * (((q1 - y) ** 2).mean() + ((q2 - y) ** 2).mean())
        return loss, ops.stop_gradient(q1.mean())


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
        self.tanh = Tanh()

    def construct(self, u, eps):
        noise = ops.clip_by_value(self.sigma * eps, -self.noise_clip, self.noise_clip)
        return ops.clip_by_value(self.tanh(u) + noise, -1.0, 1.0)
