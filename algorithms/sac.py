"""Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications",
arXiv:1812.05905): twin Q critics with Polyak-averaged targets, a tanh-squashed Gaussian
actor, and a learned temperature alpha.

Reads top to bottom: config, the squashed-Gaussian sampler, the acting cell, the losses
(critic and actor; the temperature gradient is one line), the compiled update step, and the
hooks of the shared loop. One graph call per gradient step does the critic, actor,
temperature and target updates, in Stable-Baselines3's order; the exploration action of the
next step runs in the same call as the round's last update (cells.UpdateThenAct). All sampling
noise is drawn on the host from the run's Generator and passed into the graphs. The loop,
the replay buffer and the policy cell are shared (off_policy.py, buffers.py, msrl_consistent/networks/).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops

from msrl_consistent.config import POSITIVE, Check
from msrl_consistent.distributions import rows_mean
from msrl_consistent.networks.agents import Agent, QNetwork, frozen_copy, require_box
from msrl_consistent.networks.heads import DistributionPolicyCell, ScaleToBox, SquashedGaussianOutputs, make_head
from msrl_consistent.networks.mlp import MLP, Chain, Tanh, dense, pow_tanh
from msrl_consistent.networks.stacked import MembersView

from .algorithm import register
from .cells import RankMean, SquashedGaussian, TwinCriticLoss, polyak, total, twin_critic_params
from .off_policy import BatchLayout, ContinuousActions, OffPolicyAlgorithm, OffPolicyConfig
from .offpolicy_population import OffPolicyPopulation


@dataclass
class SACConfig(OffPolicyConfig):
    policy_defaults: ClassVar[Dict[str, Any]] = {"net_arch": [256, 256], "activation": "relu", "ortho_init": False}
    """The policy keys a config leaves out: SB3's SAC defaults ([256, 256], ReLU, PyTorch's initialization)."""
    auto_ent_coef: bool = True
    """Learn the entropy coefficient alpha so the policy entropy tracks target_entropy (SB3 ent_coef='auto')."""
    init_ent_coef: float = 1.0
    """Initial entropy coefficient alpha (fixed value when auto_ent_coef is false)."""
    target_entropy: Optional[float] = None
    """Target entropy of the temperature loss (None: -dim(action space), Haarnoja et al. 2018)."""

    checks: ClassVar[Dict[str, Check]] = {**OffPolicyConfig.checks, "init_ent_coef": POSITIVE}


class SACAgent(Agent):
    """SAC (Haarnoja et al. 2018, v2): squashed Gaussian actor, twin Q critics with
    Polyak-averaged targets, temperature ``log_alpha``.

    ``actor = Chain(trunk, mean head)`` is exactly what the PolicyCell uses; the log-std
    head sits on the same trunk (``log_std_head``) and is clamped to [-20, 2] by the
    sampling and loss cells (algorithms/sac.py).
    """
    squash = True
    LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0

    def __init__(self, cfg, spec, rng: np.random.Generator):
        require_box(spec, "sac")
        super().__init__(cfg, spec)
        pc = cfg.policy
        obs_dim, act_dim = spec.obs_dim, spec.n_actions
        trunk = MLP(rng, obs_dim, pc.net_arch, pc.activation, ortho=pc.ortho_init)
        self.actor = Chain(trunk, dense(rng, trunk.out_dim, act_dim, 0.01, pc.ortho_init))
        self.log_std_head = dense(rng, trunk.out_dim, act_dim, 0.01, pc.ortho_init)
        carch = pc.critic_arch or pc.net_arch

        def make_q(r):
            return QNetwork(r, obs_dim, act_dim, carch, pc.activation, pc.ortho_init)

        self.q1 = make_q(rng)
        self.q2 = make_q(rng)
        self.q1_target = frozen_copy(make_q, self.q1)
        self.q2_target = frozen_copy(make_q, self.q2)
        init_alpha = float(getattr(cfg.algo, "init_ent_coef", 1.0))
        self.log_alpha = Parameter(Tensor(np.array([np.log(init_alpha)], np.float32)), name="log_alpha")

    def distribution_cell(self):
        """The policy cell with the pre-squash Gaussian's mean and std as further outputs."""
        outputs = SquashedGaussianOutputs(self.actor, self.log_std_head, self.LOG_STD_MIN, self.LOG_STD_MAX)
        return DistributionPolicyCell(self.normalizer, outputs, make_head(self.spec, True), "squashed_gaussian")


class SACAct(nn.Cell):
    """One graph call per vector step: (obs, noise) -> concat(env action, normalized action).

    The normalized action a = tanh(u) in [-1, 1] is what the replay buffer stores; the env
    action is TanhScaleHead's mapping of the same u (computed from a: one tanh evaluation).
    The losses use the same tanh (networks.mlp.Tanh(pow=True): pow_tanh forward, 1 - y^2
    backward), so the critics are trained on the actions the exported policy produces."""

    def __init__(self, agent: SACAgent):
        super().__init__()
        self.agent = agent
        self.sampler = SquashedGaussian(agent)
        self.scale = ScaleToBox(agent.spec.act_low, agent.spec.act_high)

    def construct(self, obs, noise):
        u, _ = self.sampler(self.agent.normalizer(obs), noise)
        a = pow_tanh(u)  # the exported TanhScaleHead's tanh
        return ops.concat((self.scale(a), a), -1)


class ActorLoss(nn.Cell):
    """mean(alpha * log pi(a|s) - min_i Q_i(s, a)), a = tanh(u) sampled with the host noise ->
    (total, the loss, log pi); one per member for a population (cells.total)."""

    def __init__(self, agent):
        super().__init__()
        self.agent = agent
        self.sampler = SquashedGaussian(agent)
        self.tanh = Tanh(pow=True)

    def construct(self, x, noise, alpha):
        u, log_prob = self.sampler(x, noise)
        a = self.tanh(u)
        q = ops.minimum(self.agent.q1(x, a), self.agent.q2(x, a))
        loss = rows_mean(alpha * log_prob - q)
        return total(loss), ops.stop_gradient(loss), ops.stop_gradient(log_prob)


class SACTrainStep(nn.Cell):
    """One gradient step in one compiled call.

    Input: one packed float32 batch [obs | action | reward | next_obs | terminated |
    noise for a ~ pi(.|s) | noise for a' ~ pi(.|s')]. Output: stacked stats (STAT_NAMES).
    Order as SB3: alpha is read before its update; the TD target uses the target critics
    before their Polyak update; the actor loss sees the critics after their update.

    On a population's MembersView the batch is (members, rows, width), every stat one per member
    (members, 6), ``coefs`` the members' gamma and tau (cells.per_member) and ``write_back`` copies
    the updated actors into the members' own, which act.
    """

    def __init__(self, agent: SACAgent, c: SACConfig, layout: BatchLayout, critic_opt, actor_opt, alpha_opt,
                 target_entropy: float, world: int = 1, coefs: Optional[dict] = None, write_back=None):
        super().__init__()
        # data parallel: each gradient is the ranks' mean (every rank samples its own batch)
        # (the actor's and the temperature's gradients travel together: one collective, not two)
        self.critic_mean = RankMean(critic_opt.parameters, world)
        self.actor_mean = RankMean(tuple(actor_opt.parameters) + (tuple(alpha_opt.parameters) if alpha_opt else ()),
                                   world)
        self.agent = agent
        self.layout = layout
        self.sampler = SquashedGaussian(agent)
        self.tanh = Tanh(pow=True)
        self.critic_opt, self.actor_opt, self.alpha_opt = critic_opt, actor_opt, alpha_opt
        self.critic_grad = ops.value_and_grad(TwinCriticLoss(agent, 0.5), None, critic_opt.parameters, has_aux=True)
        self.actor_grad = ops.value_and_grad(ActorLoss(agent), None, actor_opt.parameters, has_aux=True)
        self.targets = ms.ParameterTuple(twin_critic_params(agent, targets=True))
        self.onlines = ms.ParameterTuple(twin_critic_params(agent))
        coefs = coefs or {}
        self.gamma, self.tau = coefs.get("gamma", float(c.gamma)), coefs.get("tau", float(c.tau))
        self.auto_alpha = alpha_opt is not None
        self.target_entropy = float(target_entropy)
        self.a = agent.spec.n_actions
        self.members = agent.members if isinstance(agent, MembersView) else None
        self.write_back = write_back

    def construct(self, batch):
        obs, actions, rewards, next_obs, terminated, noise = self.layout(batch)
        eps, eps_next = noise[..., :self.a], noise[..., self.a:]
        x = self.agent.normalizer(obs)
        xn = self.agent.normalizer(next_obs)
        log_alpha = self.agent.log_alpha  # (1,), or (members, 1)
        alpha = ops.stop_gradient(ops.exp(log_alpha))
        # Soft TD target from the target critics: r + gamma * (1 - terminated) * (min Q'(s', a') - alpha log pi(a'|s'))
        un, logp_next = self.sampler(xn, eps_next)
        an = self.tanh(un)
        q_next = ops.minimum(self.agent.q1_target(xn, an), self.agent.q2_target(xn, an)) - alpha * logp_next
        y = ops.stop_gradient(rewards + self.gamma * (1.0 - terminated) * q_next)
        (_, critic_loss, q_mean), grads = self.critic_grad(x, actions, y)
        critic_done = self.critic_opt(self.critic_mean(grads))
        # Actor: after the critic update (SB3 recomputes Q with the updated critics).
        (_, actor_loss, log_prob), grads = self.actor_grad(ops.depend(x, critic_done), eps, alpha)
        # Temperature: loss -(log_alpha * (log pi + target_entropy)).mean(); its gradient is -mean(...).
        err = rows_mean(log_prob + self.target_entropy)
        alpha_loss = -(log_alpha.reshape(err.shape) * err)
        if self.auto_alpha:
            grads = self.actor_mean(grads + (ops.reshape(-err, log_alpha.shape),))
            actor_done = self.actor_opt(grads[:-1])
            self.alpha_opt(grads[-1:])
        else:
            actor_done = self.actor_opt(self.actor_mean(grads))
        polyak(self.targets, self.onlines, self.tau, critic_done)
        stats = ops.stack([critic_loss, actor_loss, alpha_loss, alpha.reshape(err.shape), -rows_mean(log_prob), q_mean])
        if self.write_back is not None:
            stats = ops.depend(stats, self.write_back(actor_done))
        return stats if self.members is None else stats.transpose(1, 0)


STAT_NAMES = ("critic_loss", "actor_loss", "ent_coef_loss", "ent_coef", "entropy", "q_mean")


@register
class SAC(ContinuousActions, OffPolicyAlgorithm):
    name = "sac"
    config_cls = SACConfig
    agent_cls = SACAgent
    data_parallel = True
    population = OffPolicyPopulation

    member_networks = ("actor", "log_std_head", "q1", "q2", "q1_target", "q2_target", "log_alpha")

    def build(self) -> None:
        c: SACConfig = self.cfg.algo
        self.target_entropy = float(c.target_entropy if c.target_entropy is not None else -self.spec.n_actions)
        if not c.auto_ent_coef:
            self.agent.log_alpha.requires_grad = False
        self.act_cell = SACAct(self.agent)
        self.noise_columns = 2 * self.spec.n_actions  # a ~ pi(.|s) and a' ~ pi(.|s')
        super().build()

    def optimizer_groups(self, agent):
        groups = {"critic": twin_critic_params(agent),
                  "actor": list(agent.actor.trainable_params()) + list(agent.log_std_head.trainable_params())}
        if self.cfg.algo.auto_ent_coef:
            groups["alpha"] = [agent.log_alpha]
        return groups

    def update_steps(self, agent, optimizers, coefs=None, write_back=None):
        o = optimizers
        return {"step": SACTrainStep(agent, self.cfg.algo, self.layout, o["critic"], o["actor"], o.get("alpha"),
                                     self.target_entropy, self.dist.world, coefs, write_back)}

    def summarize(self, stats):
        mean = np.mean([s for _, s in stats], axis=0)
        return {k: float(v) for k, v in zip(STAT_NAMES, mean)}
