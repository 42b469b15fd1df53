"""The graphs of a PPO population: K members' networks stacked on a leading axis for the update
phase (one BatchMatMul per layer for all K), and the members' own rollout and value cells side by
side in one acting graph.

Acting runs each member's ordinary cells (the MatMul of the exported policy cell), so the
actions a member takes while training are the ones its exported cell computes, bit for bit;
a stacked BatchMatMul's slice is not always bit-identical to MatMul on this CPU (measured), so
it serves the update alone. The update phase trains stacked copies of the members' Parameters
and writes every member's slice back into the member's own Parameters at its end, in the same
graph; the members' optimizer state is copied out on the host when a checkpoint needs it.
"""
from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import ParameterTuple, Tensor, nn, ops

from msrl_consistent.distributions import (
    Categorical,
    Gaussian,
    categorical_entropy,
    categorical_log_prob,
    categorical_sample,
    gaussian_entropy,
    gaussian_log_prob,
)
from msrl_consistent.networks.stacked import StackedMLP, stack_parameter

from .ppo_update import CategoricalClippedHead, power_of_two


class StackedAgent(nn.Cell):
    """The members' actor, critic and (Box actions) log std, stacked: the update phase's networks."""

    def __init__(self, agents):
        super().__init__()
        # an encoded observation (one-hot, Dict keys): the members' networks behind their encoder,
        # which has no Parameter (population.PPOPopulation refuses one that has: an image's CNN)
        self.encoder = agents[0].actor.first if agents[0].encoded else None
        nets = lambda which: [getattr(a, which).second if a.encoded else getattr(a, which) for a in agents]  # noqa: E731
        self.actor = StackedMLP(nets("actor"), "actor")
        self.critic = StackedMLP(nets("critic"), "critic")
        self.discrete = agents[0].log_std is None
        self.n_actions = agents[0].spec.n_actions
        self.log_std = None if self.discrete else stack_parameter([a.log_std for a in agents], "log_std")
        self.normalize = agents[0].normalizer.enabled
        self.norm_clip = agents[0].normalizer.clip
        self.norm_eps = agents[0].normalizer.eps

    def normalized(self, obs, mean, var):
        """ObsNormalizer's arithmetic with each member's statistics ((K, 1, obs_dim) inputs)."""
        if self.normalize:
            return ops.clip_by_value((obs - mean) / ops.sqrt(var + self.norm_eps), -self.norm_clip, self.norm_clip)
        return obs

    def encode(self, x):
        """The encoder's features of rows (K, n, obs_dim) -> (K, n, features): the members' own
        encoder's ops on the rows of all K at once (it holds no Parameter)."""
        if self.encoder is None:
            return x
        k, n = x.shape[0], x.shape[1]
        f = self.encoder(x.reshape((k * n, x.shape[2])))
        return f.reshape((k, n, f.shape[1]))


class StackedPPOLoss(nn.Cell):
    """PPOLoss (algorithms/ppo.py) for K members at once: every quantity gains a leading member
    axis; advantages are normalized per member; the loss is the sum of the members' losses, so
    each member's gradient is its own loss's. Returns (total loss, stats (7, K) without the
    gradient norm row filled)."""

    def __init__(self, stacked: StackedAgent, c, ent_coef: np.ndarray, vf_coef: np.ndarray):
        super().__init__()
        self.agent = stacked
        self.normalize_advantage = c.normalize_advantage
        self.clip_vf = c.clip_range_vf is not None
        self.use_ent = bool(np.any(ent_coef != 0.0))
        self.ent_coef = Tensor(ent_coef.astype(np.float32))
        self.vf_coef = Tensor(vf_coef.astype(np.float32))
        # as PPOLoss: the loss head with its backward written out where it gives autodiff's gradients
        lean = stacked.discrete and not self.use_ent and not self.clip_vf
        self.head = CategoricalClippedHead(stacked.n_actions, vf_coef, per_member=True) if lean else None

    def construct(self, obs, actions, old_log_prob, advantages, returns, old_values, mean, var, clip_range,
                  clip_range_vf):
        x = self.agent.encode(self.agent.normalized(obs, mean, var))
        values = self.agent.critic(x).squeeze(-1)
        out = self.agent.actor(x)
        if self.normalize_advantage and advantages.shape[1] > 1:
            n = advantages.shape[1]
            centered = advantages - advantages.mean(-1, keep_dims=True)
            std = ops.sqrt((centered * centered).sum(-1, keepdims=True) / (n - 1))
            advantages = centered / (std + 1e-8)
        if self.head is not None and power_of_two(advantages.shape[1]):  # static: one path is compiled
            head = self.head(out, values, actions, old_log_prob, advantages, returns, clip_range)
            return head[0].sum(), ops.stack([head[0], head[1], head[2], ops.stop_gradient(head[3]), head[4],
                                             head[5]])
        if self.agent.discrete:
            log_prob = categorical_log_prob(out, actions)
            entropy = categorical_entropy(out).mean(-1)
        else:
            log_std = ops.expand_dims(self.agent.log_std, 1)
            log_prob = gaussian_log_prob(out, log_std, actions)
            entropy = gaussian_entropy(self.agent.log_std)
        log_ratio = log_prob - old_log_prob
        ratio = ops.exp(log_ratio)
        clipped_ratio = ops.clip_by_value(ratio, 1.0 - clip_range, 1.0 + clip_range)
        policy_loss = -ops.minimum(advantages * ratio, advantages * clipped_ratio).mean(-1)
        if self.clip_vf:
            values = old_values + ops.clip_by_value(values - old_values, -clip_range_vf, clip_range_vf)
        value_loss = ((returns - values) ** 2).mean(-1)
        loss = policy_loss + self.vf_coef * value_loss
        if self.use_ent:
            loss = loss - self.ent_coef * entropy
        approx_kl = ((ratio - 1.0) - log_ratio).mean(-1)
        clip_fraction = (ops.abs(ratio - 1.0) > clip_range).astype(ms.float32).mean(-1)
        return loss.sum(), ops.stack([loss, policy_loss, value_loss, ops.stop_gradient(entropy), approx_kl,
                                      clip_fraction])


class StackedPPOStep(nn.Cell):
    """One minibatch of every member: the loss's gradients, each member's global-norm clipping
    (torch's clip_grad_norm_ over that member's slices) and one Adam step on the stacked
    Parameters -> stats (K, 7) in STAT_NAMES order."""

    def __init__(self, loss: StackedPPOLoss, optimizer: nn.Optimizer, max_grad_norm: np.ndarray):
        super().__init__()
        self.optimizer = optimizer
        self.grad_fn = ops.value_and_grad(loss, None, optimizer.parameters, has_aux=True)
        self.max_norm = Tensor(max_grad_norm.astype(np.float32))
        self.k = int(max_grad_norm.shape[0])

    def construct(self, obs, actions, old_log_prob, advantages, returns, old_values, mean, var, clip_range,
                  clip_range_vf):
        (total, stats), grads = self.grad_fn(obs, actions, old_log_prob, advantages, returns, old_values, mean,
                                             var, clip_range, clip_range_vf)
        stats = ops.depend(stats, total)  # (an unused output of the gradient call warns as an eliminated node)
        flat = ops.concat([g.reshape((self.k, -1)) for g in grads], 1)
        norm = ops.sqrt(ops.square(flat).sum(1))  # (K,)
        coef = ops.minimum(self.max_norm / (norm + 1e-6), 1.0)
        self.optimizer(tuple(g * coef.reshape((self.k,) + (1,) * (g.ndim - 1)) for g in grads))
        return ops.concat([stats, norm.reshape((1, self.k))], 0).transpose(1, 0)


class StackedPPOPhase(nn.Cell):
    """Every epoch and minibatch of one update phase of all K members in one graph call
    (PPOUpdatePhase's loop with a member axis), then every member's slice written into its own
    Parameters. Inputs: the members' rollouts flattened to (K * n, ...) rows, minibatch rows
    ``full`` (n_epochs * per_epoch, K * batch) and ``tail`` (n_epochs, K * rest) already offset
    to member k's rows, the normalizer statistics (K, 1, obs_dim), the learning rate and the
    clip ranges (K, 1). Returns the stats (minibatches, K, 7)."""

    def __init__(self, step: StackedPPOStep, pairs, n_epochs: int, rollout: int, batch_size: int):
        super().__init__()
        self.step = step
        self.optimizer = step.optimizer
        self.k = step.k
        self.per_epoch = rollout // batch_size
        self.ragged = rollout % batch_size != 0
        self.per_epoch_all = self.per_epoch + (1 if self.ragged else 0)
        self.total = n_epochs * self.per_epoch_all
        self.stacked_params = ParameterTuple([s for s, _ in pairs])
        # the members' Parameters share names (each member's agent names them alike), which a
        # ParameterTuple refuses; the graph tells them apart as objects
        object.__setattr__(self, "member_params", [p for _, ms_ in pairs for p in ms_])

    def minibatch(self, b, obs, actions, old_log_prob, advantages, returns, old_values, mean, var, clip_range,
                  clip_range_vf):
        k = self.k
        o = ops.gather(obs, b, 0)
        a = ops.gather(actions, b, 0)
        return self.step(o.reshape((k, -1) + o.shape[1:]), a.reshape((k, -1) + a.shape[1:]),
                         ops.gather(old_log_prob, b, 0).reshape((k, -1)), ops.gather(advantages, b, 0).reshape((k, -1)),
                         ops.gather(returns, b, 0).reshape((k, -1)), ops.gather(old_values, b, 0).reshape((k, -1)),
                         mean, var, clip_range, clip_range_vf)

    def construct(self, obs, actions, old_log_prob, advantages, returns, old_values, full, tail, mean, var,
                  learning_rate, clip_range, clip_range_vf):
        ops.assign(self.optimizer.learning_rate, learning_rate)
        stats = ops.zeros((self.total, self.k, 7), ms.float32)
        i = ops.zeros((), ms.int32)
        e = ops.zeros((), ms.int32)
        p = ops.zeros((), ms.int32)
        while i < self.total:
            if self.ragged:
                if p < self.per_epoch:
                    s = self.minibatch(full[e * self.per_epoch + p], obs, actions, old_log_prob, advantages, returns,
                                       old_values, mean, var, clip_range, clip_range_vf)
                else:
                    s = self.minibatch(tail[e], obs, actions, old_log_prob, advantages, returns, old_values, mean,
                                       var, clip_range, clip_range_vf)
                last = p == self.per_epoch
                e = ops.select(last, e + 1, e)
                p = ops.select(last, p * 0, p + 1)
            else:
                s = self.minibatch(full[i], obs, actions, old_log_prob, advantages, returns, old_values, mean, var,
                                   clip_range, clip_range_vf)
            stats = ops.tensor_scatter_update(stats, i.reshape((1, 1)), s.reshape((1, self.k, 7)))
            i = i + 1
        stats = ops.depend(stats, self.write_back(stats))
        return stats

    def write_back(self, after):
        """Member k's Parameters <- slice k of the stacked ones (after the loop: ``after``)."""
        j = 0
        for s in self.stacked_params:
            v = ops.depend(s, after)
            for k in range(self.k):
                ops.assign(self.member_params[j], v[k])
                j += 1
        return after


class PopulationRollout(nn.Cell):
    """One acting graph for all K members: obs (K, n, obs_dim) and noise (K, n, ...) ->
    ``[env action | action | log_prob | value]`` rows (K, n, width), as PackedRollout.

    The distribution's parameters (logits, Gaussian mean) come from each member's own normalizer
    and actor cells, the exported policy cell's ops at its shapes, so a member acts on exactly the
    numbers its exported cell computes. The critic (not exported) and the sampling arithmetic
    run stacked: the critic on the stacked Parameters the update phase trains (equal to the
    members' after each phase), the sample elementwise on the stacked distribution parameters."""

    def __init__(self, agents, stacked: StackedAgent, dist):
        super().__init__()
        self.agents = nn.CellList(list(agents))
        self.stacked = stacked
        self.normalize = stacked.normalize
        self.k = len(agents)
        if not stacked.discrete:
            self.low, self.high = dist.low, dist.high

    def construct(self, obs, noise):
        xs = [self.agents[k].normalizer(obs[k]) for k in range(self.k)]
        out = ops.stack([self.agents[k].actor(xs[k]) for k in range(self.k)])
        x = ops.stack(xs) if self.normalize else obs
        value = self.stacked.critic(self.stacked.encode(x))
        if self.stacked.discrete:
            action = categorical_sample(out, noise)
            log_prob = categorical_log_prob(out, action)
            env_action = action.astype(ms.float32).expand_dims(-1)
            stored = env_action
        else:
            log_std = ops.expand_dims(self.stacked.log_std, 1)
            stored = out + ops.exp(log_std) * noise
            log_prob = gaussian_log_prob(out, log_std, stored)
            env_action = ops.clip_by_value(stored, self.low, self.high)
        return ops.concat([env_action, stored, log_prob.expand_dims(-1), value], 2)


class PopulationValue(nn.Cell):
    """V(s) of every member on the stacked critic: obs (K, n, obs_dim) -> (K, n)."""

    def __init__(self, agents, stacked: StackedAgent):
        super().__init__()
        self.agents = nn.CellList(list(agents))
        self.stacked = stacked
        self.normalize = stacked.normalize
        self.k = len(agents)

    def construct(self, obs):
        x = ops.stack([self.agents[k].normalizer(obs[k]) for k in range(self.k)]) if self.normalize else obs
        return self.stacked.critic(self.stacked.encode(x)).squeeze(-1)


def supported_distribution(dist) -> bool:
    """The action distributions the stacked loss implements: Categorical and the diagonal Gaussian."""
    return type(dist) in (Categorical, Gaussian)


def stacked_pairs(stacked: StackedAgent, agents):
    """(stacked Parameter, [member k's Parameter]) for every trainable Parameter of the members."""
    out = stacked.actor.pairs() + stacked.critic.pairs()
    if not stacked.discrete:
        out.append((stacked.log_std, [a.log_std for a in agents]))
    return out
