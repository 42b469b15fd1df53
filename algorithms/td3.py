"""Twin Delayed DDPG (Fujimoto et al. 2018, "Addressing Function Approximation Error in
Actor-Critic Methods", arXiv:1802.09477): clipped double-Q learning, target policy
smoothing, delayed actor and target updates.

Reads top to bottom: config, the acting cell (Gaussian exploration noise), target policy
smoothing, the losses, the two compiled update steps, and the hooks of the shared loop
(off_policy.OffPolicyAlgorithm.train). The policy delay is chosen on the host: every
``policy_delay``-th gradient step runs the full step (critic, actor, Polyak updates of all
targets), the others the critic-only step; each gradient step
is one graph call and no step computes an actor gradient it would throw away. All noise is
drawn on the host from the run's Generator. Actions are in normalized units [-1, 1] inside
the algorithm (the replay buffer, the critics, the noise); only the env action is in the
Box's units. Follows Stable-Baselines3's TD3.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from msrl_consistent.config import NON_NEGATIVE, POSITIVE, Check
from msrl_consistent.distributions import rows_mean
from msrl_consistent.networks.agents import Agent, QNetwork, frozen_copy, require_box
from msrl_consistent.networks.heads import ScaleToBox
from msrl_consistent.networks.mlp import MLP, Tanh, pow_tanh
from msrl_consistent.networks.stacked import MembersView

from .algorithm import register
from .cells import RankMean, TargetPolicySmoothing, TwinCriticLoss, polyak, total, twin_critic_params
from .off_policy import BatchLayout, ContinuousActions, OffPolicyAlgorithm, OffPolicyConfig
from .offpolicy_population import OffPolicyPopulation


@dataclass
class TD3Config(OffPolicyConfig):
    policy_defaults: ClassVar[Dict[str, Any]] = {"net_arch": [400, 300], "activation": "relu", "ortho_init": False}
    """The policy keys a config leaves out: SB3's TD3 defaults ([400, 300], ReLU, PyTorch's initialization)."""
    learning_rate: float = 1e-3
    """Adam learning rate of the critics and the actor."""
    policy_delay: int = 2
    """Update the actor and the targets every this many critic updates."""
    target_policy_noise: float = 0.2
    """Std of the Gaussian noise added to the target action (normalized action units)."""
    target_noise_clip: float = 0.5
    """Clip of the target policy noise (normalized action units)."""
    action_noise_sigma: float = 0.1
    """Std of the Gaussian exploration noise added to the actor's action (normalized units)."""

    checks: ClassVar[Dict[str, Check]] = {
        **OffPolicyConfig.checks, "policy_delay": POSITIVE, "target_policy_noise": NON_NEGATIVE,
        "target_noise_clip": NON_NEGATIVE, "action_noise_sigma": NON_NEGATIVE}


class TD3Agent(Agent):
    """TD3 (Fujimoto et al. 2018): deterministic actor (pre-tanh output), twin Q critics,
    target copies of the actor and both critics."""
    squash = True

    def __init__(self, cfg, spec, rng: np.random.Generator):
        require_box(spec, "td3")
        super().__init__(cfg, spec)
        pc = cfg.policy
        obs_dim, act_dim = spec.obs_dim, spec.n_actions

        def make_actor(r):
            return MLP(r, obs_dim, pc.net_arch, pc.activation, act_dim, 0.01, pc.ortho_init)

        carch = pc.critic_arch or pc.net_arch

        def make_q(r):
            return QNetwork(r, obs_dim, act_dim, carch, pc.activation, pc.ortho_init)

        self.actor = make_actor(rng)
        self.q1 = make_q(rng)
        self.q2 = make_q(rng)
        self.actor_target = frozen_copy(make_actor, self.actor)
        self.q1_target = frozen_copy(make_q, self.q1)
        self.q2_target = frozen_copy(make_q, self.q2)


class TD3Act(nn.Cell):
    """One graph call per vector step: (obs, noise) -> concat(env action, normalized action),
    normalized action = clip(tanh(actor(obs)) + sigma * noise, -1, 1) (SB3's NormalActionNoise)."""

    def __init__(self, agent: TD3Agent, sigma: float):
        super().__init__()
        self.agent = agent
        self.sigma = float(sigma)
        self.scale = ScaleToBox(agent.spec.act_low, agent.spec.act_high)

    def construct(self, obs, noise):
        a = pow_tanh(self.agent.actor(self.agent.normalizer(obs)))  # the exported TanhScaleHead's tanh
        a = ops.clip_by_value(a + self.sigma * noise, -1.0, 1.0)
        return ops.concat((self.scale(a), a), -1)


class ActorLoss(nn.Cell):
    """-mean Q_1(s, tanh(actor(s))) (deterministic policy gradient through the first critic) ->
    (total, the loss); one per member for a population (cells.total)."""

    def __init__(self, agent):
        super().__init__()
        self.agent = agent
        self.tanh = Tanh(pow=True)

    def construct(self, x):
        loss = -rows_mean(self.agent.q1(x, self.tanh(self.agent.actor(x))))
        return total(loss), ops.stop_gradient(loss)


class TD3CriticStep(nn.Cell):
    """Critic-only gradient step. Input: packed float32 batch [obs | action | reward |
    next_obs | terminated | target smoothing noise]; output: stack([critic_loss, q_mean]).
    On a population's MembersView: (members, rows, width) in, (members, 2) out; ``coefs``
    the members' gamma and tau (cells.per_member)."""

    def __init__(self, agent: TD3Agent, c: TD3Config, layout: BatchLayout, critic_opt, world: int = 1,
                 coefs: Optional[dict] = None):
        super().__init__()
        self.critic_mean = RankMean(critic_opt.parameters, world)  # data parallel: the ranks' mean gradient
        self.agent = agent
        self.layout = layout
        self.critic_opt = critic_opt
        self.critic_grad = ops.value_and_grad(TwinCriticLoss(agent, 1.0), None, critic_opt.parameters, has_aux=True)
        self.smooth = TargetPolicySmoothing(c.target_policy_noise, c.target_noise_clip)
        coefs = coefs or {}
        self.gamma, self.tau = coefs.get("gamma", float(c.gamma)), coefs.get("tau", float(c.tau))
        self.members = agent.members if isinstance(agent, MembersView) else None

    def critic_update(self, batch):
        obs, actions, rewards, next_obs, terminated, eps = self.layout(batch)
        x = self.agent.normalizer(obs)
        xn = self.agent.normalizer(next_obs)
        # Clipped double-Q target with target policy smoothing (Fujimoto et al. 2018, eq. 10 and 14).
        an = self.smooth(self.agent.actor_target(xn), eps)
        q_next = ops.minimum(self.agent.q1_target(xn, an), self.agent.q2_target(xn, an))
        y = ops.stop_gradient(rewards + self.gamma * (1.0 - terminated) * q_next)
        (_, loss, q_mean), grads = self.critic_grad(x, actions, y)
        done = self.critic_opt(self.critic_mean(grads))
        return x, loss, q_mean, done

    def construct(self, batch):
        _, loss, q_mean, _ = self.critic_update(batch)
        return self.rows(ops.stack([loss, q_mean]))

    def rows(self, stats):
        """One run's stats (n,), or the members' (members, n)."""
        return stats if self.members is None else stats.transpose(1, 0)


class TD3FullStep(TD3CriticStep):
    """Critic step, then the delayed actor step and the Polyak updates of all targets;
    output: stack([critic_loss, q_mean, actor_loss]). A population's step then copies the
    updated actors into the members' own (``write_back``), which act."""

    def __init__(self, agent: TD3Agent, c: TD3Config, layout: BatchLayout, critic_opt, actor_opt, world: int = 1,
                 coefs: Optional[dict] = None, write_back=None):
        super().__init__(agent, c, layout, critic_opt, world, coefs)
        self.actor_opt = actor_opt
        self.actor_mean = RankMean(actor_opt.parameters, world)
        self.actor_grad = ops.value_and_grad(ActorLoss(agent), None, actor_opt.parameters, has_aux=True)
        self.critic_targets = ms.ParameterTuple(twin_critic_params(agent, targets=True))
        self.critics = ms.ParameterTuple(twin_critic_params(agent))
        self.actor_targets = ms.ParameterTuple(list(agent.actor_target.get_parameters()))
        self.actors = ms.ParameterTuple(list(agent.actor.get_parameters()))
        self.write_back = write_back

    def construct(self, batch):
        x, critic_loss, q_mean, critic_done = self.critic_update(batch)
        # The actor loss sees the updated critics (as SB3).
        (_, actor_loss), grads = self.actor_grad(ops.depend(x, critic_done))
        actor_done = self.actor_opt(self.actor_mean(grads))
        polyak(self.critic_targets, self.critics, self.tau, critic_done)
        polyak(self.actor_targets, self.actors, self.tau, actor_done)
        stats = ops.stack([critic_loss, q_mean, actor_loss])
        if self.write_back is not None:
            stats = ops.depend(stats, self.write_back(actor_done))
        return self.rows(stats)


@register
class TD3(ContinuousActions, OffPolicyAlgorithm):
    name = "td3"
    config_cls = TD3Config
    agent_cls = TD3Agent
    data_parallel = True
    population = OffPolicyPopulation

    member_networks = ("actor", "q1", "q2", "actor_target", "q1_target", "q2_target")

    def build(self) -> None:
        self.act_cell = TD3Act(self.agent, self.cfg.algo.action_noise_sigma)
        self.noise_columns = self.spec.n_actions  # target policy smoothing
        super().build()

    def optimizer_groups(self, agent):
        return {"critic": twin_critic_params(agent), "actor": list(agent.actor.trainable_params())}

    def update_steps(self, agent, optimizers, coefs=None, write_back=None):
        c, o, world = self.cfg.algo, optimizers, self.dist.world
        return {"critic": TD3CriticStep(agent, c, self.layout, o["critic"], world, coefs),
                "full": TD3FullStep(agent, c, self.layout, o["critic"], o["actor"], world, coefs, write_back)}

    def update_kind(self, n_update: int) -> str:
        """Every policy_delay-th gradient step is the full step (critic, actor, targets)."""
        return "full" if n_update % self.cfg.algo.policy_delay == 0 else "critic"

    def summarize(self, stats):
        both = np.stack([s[:2] for _, s in stats])
        res = {"critic_loss": float(both[:, 0].mean()), "q_mean": float(both[:, 1].mean())}
        full = [s[2] for kind, s in stats if kind == "full"]
        if full:
            res["actor_loss"] = float(np.mean(full))
        return res
