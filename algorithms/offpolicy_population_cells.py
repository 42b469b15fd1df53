"""The graphs of a SAC or TD3 population: K members' networks stacked on a leading axis for the
gradient step (one BatchMatMul per layer for all K, population_cells.StackedMLP), and the
members' own acting cells side by side.

One graph call runs one gradient step of every member (the same losses, order and Polyak
updates as its own algorithm's step, sac.SACTrainStep and td3.TD3FullStep, with a member axis
in front) and writes each member's slice of the stacked actor back into the member's own actor,
which the members' acting cells (the exported policy cell's ops) read: a member explores with
exactly the numbers its exported cell computes. The critics, targets and SAC's temperature live
stacked; the population copies them into the members on the host when logs, checkpoints or the
end of training read them (``host_pairs``).
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
from mindspore import ParameterTuple, Tensor, nn, ops

from msrl_consistent.networks.mlp import Tanh
from msrl_consistent.networks.stacked import StackedMLP, stack_parameter

from .cells import SquashedGaussian, TargetPolicySmoothing
from .stacked_optim import stacked_optimizer


def per_member(values: np.ndarray):
    """A coefficient the members share as a Python float (the single run's arithmetic), or one
    value per member as a (K, 1) Tensor (a sweep)."""
    if np.all(values == values[0]):
        return float(values[0])
    return Tensor(values.astype(np.float32).reshape(-1, 1))


def _frozen(stacked: StackedMLP) -> StackedMLP:
    for p in stacked.trainable_params():
        p.requires_grad = False
    return stacked


class StackedQ(nn.Cell):
    """K copies of a QNetwork: (x (K, B, obs), a (K, B, act)) -> Q (K, B)."""

    def __init__(self, qs: Sequence[nn.Cell], prefix: str, frozen: bool = False):
        super().__init__()
        self.net = StackedMLP([q.net for q in qs], prefix)
        if frozen:
            _frozen(self.net)

    def construct(self, x, a):
        return self.net(ops.concat((x, a), -1)).squeeze(-1)


def split_batch(batch, obs_dim: int, act_dim: int):
    """The packed batch (off_policy.BatchLayout) with a leading member axis: (K, B, width) ->
    (obs, actions, rewards, next_obs, terminated, noise)."""
    o, a = obs_dim, act_dim
    return (batch[..., :o], batch[..., o:o + a], batch[..., o + a], batch[..., o + a + 1:2 * o + a + 1],
            batch[..., 2 * o + a + 1], batch[..., 2 * o + a + 2:])


def write_back(pairs, after) -> list:
    """Graph code: member k's Parameter <- slice k of its stacked Parameter, read after ``after``."""
    writes = []
    for s, members in pairs:
        v = ops.depend(s, after)
        for k in range(len(members)):
            writes.append(ops.assign(members[k], v[k]))
    return writes


def polyak_stacked(targets, onlines, tau, ready):
    """cells.polyak for stacked Parameters, ``tau`` a float or one value per member (K, 1)."""
    for t, o in zip(targets, onlines):
        rate = tau if isinstance(tau, float) else tau.reshape((-1,) + (1,) * (t.ndim - 1))
        ops.assign_add(t, rate * (ops.depend(o, ready) - t))
    return ready


class PopulationAct(nn.Cell):
    """Every member's own acting cell on its rows: obs (K, n, obs), noise (K, n, act) -> the cells'
    concat(env action, normalized action) (K, n, 2 * act)."""

    def __init__(self, acts: Sequence[nn.Cell]):
        super().__init__()
        self.acts = nn.CellList(list(acts))
        self.k = len(acts)

    def construct(self, obs, noise):
        return ops.stack([self.acts[k](obs[k], noise[k]) for k in range(self.k)])


class StackedUpdateThenAct(nn.Cell):
    """cells.UpdateThenAct for a population: one stacked gradient step, then every member's action
    for the next observation, read after the step wrote the members' actors."""

    def __init__(self, update: nn.Cell, act: PopulationAct):
        super().__init__()
        self.update = update
        self.act = act

    def construct(self, batch, obs, noise):
        stats = self.update(batch)
        return stats, self.act(ops.depend(obs, stats), noise)


class Stacked:
    """What an off-policy population builds for its members: the stacked update cells (kind ->
    cell: packed batch (K, B, width) -> stats (K, n_stats)), the members' acting cells side by
    side, the stacked optimizers (name -> (stacked optimizer, [(stacked, [member Parameters])]))
    and ``host_pairs``, the stacked Parameters the members' own copies are synced from on the host."""

    update_cells: Dict[str, nn.Cell]
    optimizers: Dict[str, tuple]
    host_pairs: List[tuple]

    def __init__(self, members):
        self.act = PopulationAct([m.act_cell for m in members])
        m0 = members[0]
        self.obs_dim, self.act_dim = m0.spec.obs_dim, m0.spec.n_actions
        self.coef = lambda key: np.array([float(getattr(m.cfg.algo, key)) for m in members])  # noqa: E731
        self.per_member_rate = len(set(self.coef("learning_rate"))) > 1

    def fused(self, update: nn.Cell) -> nn.Cell:
        """``update`` followed by every member's action (one graph: StackedUpdateThenAct)."""
        return StackedUpdateThenAct(update, self.act)

    def optimizer(self, name: str, pairs) -> nn.Cell:
        opt = stacked_optimizer(pairs, self.coef("learning_rate"), 1e-8)  # the members' Adam: eps 1e-8
        self.optimizers[name] = (opt, pairs)
        return opt


class StackedSACAgent(nn.Cell):
    """The members' SAC networks stacked: actor trunk, mean and log-std heads, twin critics and
    their targets, temperatures (K, 1)."""

    def __init__(self, agents):
        super().__init__()
        self.actor = _ChainView(StackedMLP([a.actor.first for a in agents], "actor.first"),
                                StackedMLP([a.actor.second for a in agents], "actor.second"))
        self.log_std_head = StackedMLP([a.log_std_head for a in agents], "log_std_head")
        self.q1 = StackedQ([a.q1 for a in agents], "q1")
        self.q2 = StackedQ([a.q2 for a in agents], "q2")
        self.q1_target = StackedQ([a.q1_target for a in agents], "q1_target", frozen=True)
        self.q2_target = StackedQ([a.q2_target for a in agents], "q2_target", frozen=True)
        self.log_alpha = stack_parameter([a.log_alpha for a in agents], "log_alpha")
        self.log_alpha.requires_grad = bool(agents[0].log_alpha.requires_grad)
        self.LOG_STD_MIN, self.LOG_STD_MAX = agents[0].LOG_STD_MIN, agents[0].LOG_STD_MAX

    def actor_pairs(self):
        return self.actor.first.pairs() + self.actor.second.pairs() + self.log_std_head.pairs()

    def critic_pairs(self):
        return self.q1.net.pairs() + self.q2.net.pairs()

    def target_pairs(self):
        return self.q1_target.net.pairs() + self.q2_target.net.pairs()


class _ChainView(nn.Cell):
    """``actor.first`` / ``actor.second`` as SquashedGaussian reads them from a SACAgent."""

    def __init__(self, first, second):
        super().__init__()
        self.first = first
        self.second = second


class StackedTwinCriticLoss(nn.Cell):
    """cells.TwinCriticLoss per member, summed over the members -> (total, per-member loss (K,), mean Q1 (K,))."""

    def __init__(self, agent, scale: float):
        super().__init__()
        self.agent = agent
        self.scale = float(scale)

    def construct(self, x, actions, y):
        q1 = self.agent.q1(x, actions)
        q2 = self.agent.q2(x, actions)
        loss = self.scale * (((q1 - y) ** 2).mean(-1) + ((q2 - y) ** 2).mean(-1))
        return loss.sum(), ops.stop_gradient(loss), ops.stop_gradient(q1.mean(-1))


class StackedSACActorLoss(nn.Cell):
    """sac.ActorLoss per member, summed -> (total, per-member loss (K,), log pi (K, B))."""

    def __init__(self, agent):
        super().__init__()
        self.agent = agent
        self.sampler = SquashedGaussian(agent)
        self.tanh = Tanh()

    def construct(self, x, noise, alpha):
        u, log_prob = self.sampler(x, noise)
        a = self.tanh(u)
        q = ops.minimum(self.agent.q1(x, a), self.agent.q2(x, a))
        loss = (alpha * log_prob - q).mean(-1)
        return loss.sum(), ops.stop_gradient(loss), ops.stop_gradient(log_prob)


class StackedSACStep(nn.Cell):
    """sac.SACTrainStep for K members: packed batch (K, B, width) -> stats (K, 6) in sac.STAT_NAMES
    order; then the members' actors <- their slices of the stacked actor."""

    def __init__(self, stacked: StackedSACAgent, obs_dim: int, act_dim: int, critic_opt, actor_opt, alpha_opt,
                 actor_pairs, gamma, tau, target_entropy: float):
        super().__init__()
        self.agent = stacked
        self.o, self.a = obs_dim, act_dim
        self.sampler = SquashedGaussian(stacked)
        self.tanh = Tanh()
        self.critic_opt, self.actor_opt, self.alpha_opt = critic_opt, actor_opt, alpha_opt
        self.critic_grad = ops.value_and_grad(StackedTwinCriticLoss(stacked, 0.5), None, critic_opt.parameters,
                                              has_aux=True)
        self.actor_grad = ops.value_and_grad(StackedSACActorLoss(stacked), None, actor_opt.parameters, has_aux=True)
        self.targets = ParameterTuple([s for s, _ in stacked.target_pairs()])
        self.onlines = ParameterTuple([s for s, _ in stacked.critic_pairs()])
        self.gamma, self.tau = gamma, tau
        self.target_entropy = float(target_entropy)
        object.__setattr__(self, "actor_pairs", actor_pairs)  # the members' Parameters share names

    def construct(self, batch):
        obs, actions, rewards, next_obs, terminated, noise = split_batch(batch, self.o, self.a)
        eps, eps_next = noise[..., :self.a], noise[..., self.a:]
        alpha = ops.stop_gradient(ops.exp(self.agent.log_alpha))  # (K, 1)
        un, logp_next = self.sampler(next_obs, eps_next)
        an = self.tanh(un)
        q_next = ops.minimum(self.agent.q1_target(next_obs, an), self.agent.q2_target(next_obs, an)) - alpha * logp_next
        y = ops.stop_gradient(rewards + self.gamma * (1.0 - terminated) * q_next)
        (_, critic_loss, q_mean), grads = self.critic_grad(obs, actions, y)
        critic_done = self.critic_opt(grads)
        (_, actor_loss, log_prob), grads = self.actor_grad(ops.depend(obs, critic_done), eps, alpha)
        err = (log_prob + self.target_entropy).mean(-1)  # (K,)
        alpha_loss = -(self.agent.log_alpha.reshape((-1,)) * err)
        actor_done = self.actor_opt(grads)
        if self.alpha_opt is not None:
            self.alpha_opt((ops.reshape(-err, (-1, 1)),))
        polyak_stacked(self.targets, self.onlines, self.tau, critic_done)
        stats = ops.stack([critic_loss, actor_loss, alpha_loss, alpha.reshape((-1,)), -log_prob.mean(-1), q_mean])
        stats = ops.depend(stats, write_back(self.actor_pairs, actor_done))
        return stats.transpose(1, 0)


class StackedSAC(Stacked):
    """A SAC population's stacked networks, optimizers and step cell (kind ``step``)."""

    def __init__(self, members):
        super().__init__(members)
        agents = [m.agent for m in members]
        self.agent = StackedSACAgent(agents)
        ag = self.agent
        actor_pairs = ag.actor_pairs()
        self.optimizers = {}
        critic_opt = self.optimizer("critic", ag.critic_pairs())
        actor_opt = self.optimizer("actor", actor_pairs)
        alpha_pairs = [(ag.log_alpha, [a.log_alpha for a in agents])]
        alpha_opt = self.optimizer("alpha", alpha_pairs) if members[0].alpha_opt is not None else None
        entropies = {m.target_entropy for m in members}
        step = StackedSACStep(ag, self.obs_dim, self.act_dim, critic_opt, actor_opt, alpha_opt, actor_pairs,
                              per_member(self.coef("gamma")), per_member(self.coef("tau")), entropies.pop())
        self.update_cells = {"step": step}
        self.host_pairs = ag.critic_pairs() + ag.target_pairs() + alpha_pairs


class StackedTD3Agent(nn.Cell):
    """The members' TD3 networks stacked: actor, twin critics and the targets of all three."""

    def __init__(self, agents):
        super().__init__()
        self.actor = StackedMLP([a.actor for a in agents], "actor")
        self.actor_target = _frozen(StackedMLP([a.actor_target for a in agents], "actor_target"))
        self.q1 = StackedQ([a.q1 for a in agents], "q1")
        self.q2 = StackedQ([a.q2 for a in agents], "q2")
        self.q1_target = StackedQ([a.q1_target for a in agents], "q1_target", frozen=True)
        self.q2_target = StackedQ([a.q2_target for a in agents], "q2_target", frozen=True)


class StackedTD3CriticStep(nn.Cell):
    """td3.TD3CriticStep for K members -> stats (K, 2): critic loss, mean Q1."""

    def __init__(self, stacked: StackedTD3Agent, obs_dim: int, act_dim: int, c, critic_opt, gamma):
        super().__init__()
        self.agent = stacked
        self.o, self.a = obs_dim, act_dim
        self.critic_opt = critic_opt
        self.critic_grad = ops.value_and_grad(StackedTwinCriticLoss(stacked, 1.0), None, critic_opt.parameters,
                                              has_aux=True)
        self.smooth = TargetPolicySmoothing(c.target_policy_noise, c.target_noise_clip)
        self.gamma = gamma

    def critic_update(self, batch):
        obs, actions, rewards, next_obs, terminated, eps = split_batch(batch, self.o, self.a)
        an = self.smooth(self.agent.actor_target(next_obs), eps)
        q_next = ops.minimum(self.agent.q1_target(next_obs, an), self.agent.q2_target(next_obs, an))
        y = ops.stop_gradient(rewards + self.gamma * (1.0 - terminated) * q_next)
        (_, loss, q_mean), grads = self.critic_grad(obs, actions, y)
        done = self.critic_opt(grads)
        return obs, loss, q_mean, done

    def construct(self, batch):
        _, loss, q_mean, _ = self.critic_update(batch)
        return ops.stack([loss, q_mean]).transpose(1, 0)


class StackedTD3ActorLoss(nn.Cell):
    """td3.ActorLoss per member, summed -> (total, per-member loss)."""

    def __init__(self, agent):
        super().__init__()
        self.agent = agent
        self.tanh = Tanh()

    def construct(self, x):
        loss = -self.agent.q1(x, self.tanh(self.agent.actor(x))).mean(-1)
        return loss.sum(), ops.stop_gradient(loss)


class StackedTD3FullStep(StackedTD3CriticStep):
    """td3.TD3FullStep for K members -> stats (K, 3); then the members' actors <- their slices."""

    def __init__(self, stacked: StackedTD3Agent, obs_dim: int, act_dim: int, c, critic_opt, actor_opt, actor_pairs,
                 gamma, tau):
        super().__init__(stacked, obs_dim, act_dim, c, critic_opt, gamma)
        self.actor_opt = actor_opt
        self.actor_grad = ops.value_and_grad(StackedTD3ActorLoss(stacked), None, actor_opt.parameters, has_aux=True)
        self.tau = tau
        self.critic_targets = ParameterTuple([s for s, _ in stacked.q1_target.net.pairs() + stacked.q2_target.net.pairs()])
        self.critics = ParameterTuple([s for s, _ in stacked.q1.net.pairs() + stacked.q2.net.pairs()])
        self.actor_targets = ParameterTuple([s for s, _ in stacked.actor_target.pairs()])
        self.actors = ParameterTuple([s for s, _ in stacked.actor.pairs()])
        object.__setattr__(self, "actor_pairs", actor_pairs)

    def construct(self, batch):
        x, critic_loss, q_mean, critic_done = self.critic_update(batch)
        (_, actor_loss), grads = self.actor_grad(ops.depend(x, critic_done))
        actor_done = self.actor_opt(grads)
        polyak_stacked(self.critic_targets, self.critics, self.tau, critic_done)
        polyak_stacked(self.actor_targets, self.actors, self.tau, actor_done)
        stats = ops.stack([critic_loss, q_mean, actor_loss])
        stats = ops.depend(stats, write_back(self.actor_pairs, actor_done))
        return stats.transpose(1, 0)


class StackedTD3(Stacked):
    """A TD3 population's stacked networks, optimizers and step cells (kinds ``critic``, ``full``)."""

    def __init__(self, members):
        super().__init__(members)
        agents = [m.agent for m in members]
        c = members[0].cfg.algo
        self.agent = ag = StackedTD3Agent(agents)
        self.optimizers = {}
        critic_pairs = ag.q1.net.pairs() + ag.q2.net.pairs()
        actor_pairs = ag.actor.pairs()
        critic_opt = self.optimizer("critic", critic_pairs)
        actor_opt = self.optimizer("actor", actor_pairs)
        gamma, tau = per_member(self.coef("gamma")), per_member(self.coef("tau"))
        self.update_cells = {
            "critic": StackedTD3CriticStep(ag, self.obs_dim, self.act_dim, c, critic_opt, gamma),
            "full": StackedTD3FullStep(ag, self.obs_dim, self.act_dim, c, critic_opt, actor_opt, actor_pairs, gamma,
                                       tau)}
        self.host_pairs = (critic_pairs + ag.q1_target.net.pairs() + ag.q2_target.net.pairs()
                           + ag.actor_target.pairs())


STACKED = {"sac": StackedSAC, "td3": StackedTD3}
"""The stacked graphs of each off-policy algorithm's population."""
