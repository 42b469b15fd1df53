"""Deep Q-Network (Mnih et al. 2015, "Human-level control through deep reinforcement learning"):
a Q-network trained on replayed transitions against a periodically copied target network,
with epsilon-greedy exploration. Follows Stable-Baselines3's DQN: Huber loss, gradient norm
clipped at ``max_grad_norm``, the target updated every ``target_update_interval`` environment
steps (Polyak with ``tau``, 1: a copy), epsilon decayed linearly over ``exploration_fraction`` of
the run.

Reads top to bottom: config, agent, the acting cell, the loss and the compiled gradient step,
and the hooks of the shared loop (off_policy.OffPolicyAlgorithm). The exported policy is the
greedy argmax of the Q-network (the agent's PolicyCell); the acting cell runs that same cell
and replaces its action where the host's epsilon-greedy draw says to explore, so epsilon
never reaches the exported graph. The draws (the coin and the random action of every env)
come from the run's Generator and enter the graph as inputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from msrl_consistent.config import POSITIVE, UNIT_INTERVAL, Check, ConfigError
from msrl_consistent.distributions import rows_mean
from msrl_consistent.networks.agents import Agent, frozen_copy
from msrl_consistent.networks.mlp import MLP
from msrl_consistent.networks.stacked import MembersView

from .algorithm import register
from .cells import GradNormClip, RankMean, polyak, total
from .off_policy import BatchLayout, OffPolicyAlgorithm, OffPolicyConfig
from .offpolicy_population import OffPolicyPopulation


@dataclass
class DQNConfig(OffPolicyConfig):
    policy_defaults: ClassVar[Dict[str, Any]] = {"net_arch": [64, 64], "activation": "relu", "ortho_init": False}
    """The policy keys a config leaves out: SB3's DQN defaults ([64, 64], ReLU, PyTorch's initialization)."""
    # SB3's DQN defaults of keys every off-policy algorithm has (documented on OffPolicyConfig)
    learning_starts: int = 100
    batch_size: int = 32
    train_freq: int = 4
    learning_rate: float = 1e-4
    """Adam learning rate of the Q-network."""
    tau: float = 1.0
    """Polyak coefficient of each target update (1: the target becomes a copy of the Q-network)."""
    target_update_interval: int = 10000
    """Environment steps between target updates (counted per vector step, as Stable-Baselines3:
    every max(target_update_interval // n_envs, 1) vector steps)."""
    exploration_fraction: float = 0.1
    """Fraction of total_timesteps over which epsilon decays linearly from its initial to its final value."""
    exploration_initial_eps: float = 1.0
    """Epsilon at the start of the run: the probability of a uniform random action."""
    exploration_final_eps: float = 0.05
    """Epsilon after exploration_fraction of the run."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clipping as torch's clip_grad_norm_ (SB3's DQN)."""

    checks: ClassVar[Dict[str, Check]] = {
        **OffPolicyConfig.checks, "target_update_interval": POSITIVE, "exploration_fraction": UNIT_INTERVAL,
        "exploration_initial_eps": UNIT_INTERVAL, "exploration_final_eps": UNIT_INTERVAL, "max_grad_norm": POSITIVE}


class DQNAgent(Agent):
    """The Q-network (``actor``: observation -> one Q-value per action, whose argmax the
    PolicyCell exports) and its target copy (non-trainable Parameters)."""

    def __init__(self, cfg, spec, rng: np.random.Generator):
        if spec.act_kind != "Discrete":
            raise ConfigError(f"dqn needs a Discrete action space; {cfg.env.id} has {spec.act_kind} actions "
                              f"(use sac or td3 for Box actions, ppo for the others)")
        if spec.obs_kind != "Box":
            raise ConfigError(f"dqn needs Box observations; {cfg.env.id} has {spec.obs_kind} observations "
                              f"(use ppo, which encodes them inside the policy cell)")
        super().__init__(cfg, spec)
        pc = cfg.policy

        def make_q(r):
            return MLP(r, spec.obs_dim, pc.net_arch, pc.activation, spec.n_actions, 1.0, pc.ortho_init)

        self.actor = make_q(rng)
        self.q_target = frozen_copy(make_q, self.actor)


class DQNAct(nn.Cell):
    """One graph call per vector step: (obs, noise) -> concat(env action, stored action) as float32
    columns. The action is the exported PolicyCell's greedy argmax, replaced by ``noise[:, 1]``
    (a uniform random action) where ``noise[:, 0]`` is 1 (the host's epsilon-greedy coin)."""

    def __init__(self, agent: DQNAgent):
        super().__init__()
        self.policy = agent.policy_cell()

    def construct(self, obs, noise):
        greedy = self.policy(obs).astype(ms.float32)
        a = ops.select(noise[:, 0] > 0.5, noise[:, 1], greedy).reshape((-1, 1))
        return ops.concat((a, a), -1)


class QLoss(nn.Cell):
    """Huber loss (smooth L1, delta 1, as F.smooth_l1_loss) between Q(s, a) and the target y ->
    (total, the loss, mean Q(s, a) for logging); one per member for a population (cells.total)."""

    def __init__(self, agent: DQNAgent):
        super().__init__()
        self.agent = agent

    def construct(self, x, actions, y):
        values = self.agent.actor(x)
        q = ops.gather_elements(values, values.ndim - 1, actions.expand_dims(-1)).squeeze(-1)
        d = q - y
        ad = ops.abs(d)
        loss = rows_mean(ops.select(ad < 1.0, 0.5 * d * d, ad - 0.5))
        return total(loss), ops.stop_gradient(loss), ops.stop_gradient(rows_mean(q))


class DQNStep(nn.Cell):
    """One gradient step. Input: packed float32 batch [obs | action | reward | next_obs |
    terminated]; the target ``r + gamma * (1 - terminated) * max_a' Q_target(s', a')``, the
    Huber loss's gradient (data parallel: the ranks' mean), torch's clip_grad_norm_, Adam;
    output: stack([loss, q_mean, grad_norm]). On a population's MembersView: (members, rows,
    width) in, (members, 3) out, each member clipped by its own norm, then the members' own
    Q-networks (which act) <- the updated ones (``write_back``)."""

    def __init__(self, agent: DQNAgent, c: DQNConfig, layout: BatchLayout, optimizer, world: int = 1,
                 coefs: Optional[dict] = None, write_back=None):
        super().__init__()
        self.agent = agent
        self.layout = layout
        self.optimizer = optimizer
        self.grad_fn = ops.value_and_grad(QLoss(agent), None, optimizer.parameters, has_aux=True)
        self.rank_mean = RankMean(optimizer.parameters, world)
        self.gamma = (coefs or {}).get("gamma", float(c.gamma))
        self.members = agent.members if isinstance(agent, MembersView) else None
        self.clip = GradNormClip(c.max_grad_norm if self.members is None else [c.max_grad_norm] * self.members,
                                 self.members)
        self.write_back = write_back

    def construct(self, batch):
        obs, actions, rewards, next_obs, terminated, _ = self.layout(batch)
        x = self.agent.normalizer(obs)
        q_next = self.agent.q_target(self.agent.normalizer(next_obs)).max(-1)
        y = ops.stop_gradient(rewards + self.gamma * (1.0 - terminated) * q_next)
        (_, loss, q_mean), grads = self.grad_fn(x, actions.squeeze(-1).astype(ms.int32), y)
        grads = self.rank_mean(grads)
        norm = self.clip.norm(grads)
        done = self.optimizer(self.clip(grads, norm))
        stats = ops.stack([loss, q_mean, norm.reshape(loss.shape)])
        if self.write_back is not None:
            stats = ops.depend(stats, self.write_back(done))
        return stats if self.members is None else stats.transpose(1, 0)


class TargetUpdate(nn.Cell):
    """target <- target + tau * (online - target) for every Q-network Parameter (one graph call)."""

    def __init__(self, agent: DQNAgent, tau):
        super().__init__()
        self.targets = ms.ParameterTuple(list(agent.q_target.get_parameters()))
        self.onlines = ms.ParameterTuple(list(agent.actor.get_parameters()))
        self.tau = tau

    def construct(self):
        return polyak(self.targets, self.onlines, self.tau, ops.zeros((), ms.float32))


@register
class DQN(OffPolicyAlgorithm):
    name = "dqn"
    config_cls = DQNConfig
    agent_cls = DQNAgent
    data_parallel = True
    population = OffPolicyPopulation
    member_networks = ("actor", "q_target")
    acting_group = "q"

    def build(self) -> None:
        self.act_cell = DQNAct(self.agent)
        super().build()
        self._trained_calls = 0

    def optimizer_groups(self, agent):
        return {"q": list(agent.actor.trainable_params())}

    def update_steps(self, agent, optimizers, coefs=None, write_back=None):
        c = self.cfg.algo
        return {"q": DQNStep(agent, c, self.layout, optimizers["q"], self.dist.world, coefs, write_back),
                "target": TargetUpdate(agent, (coefs or {}).get("tau", float(c.tau)))}

    # -- exploration ---------------------------------------------------------------------------
    def exploration_rate(self) -> float:
        """Epsilon at this step: linear from the initial to the final value over
        exploration_fraction of total_timesteps (SB3's LinearSchedule), then constant."""
        c: DQNConfig = self.cfg.algo
        progress = self.num_timesteps / self.cfg.total_timesteps
        if c.exploration_fraction == 0 or progress > c.exploration_fraction:
            return float(c.exploration_final_eps)
        return float(c.exploration_initial_eps + progress * (c.exploration_final_eps - c.exploration_initial_eps)
                     / c.exploration_fraction)

    def exploration_noise(self, n: int) -> np.ndarray:
        """The acting cell's (n, 2) input: per env, 1.0 where epsilon-greedy explores (a uniform
        draw below epsilon), and a uniform random action; both from the run's Generator."""
        explore = self.rng.random(n) < self.exploration_rate()
        random_a = self.rng.integers(0, self.spec.n_actions, n)
        return np.stack([explore, random_a], 1).astype(np.float32)

    def random_actions(self, n: int):
        """Uniform random actions (warm-up before learning_starts): (env action, stored action)."""
        a = self.rng.integers(0, self.spec.n_actions, n).astype(np.int32)
        return a, a.astype(np.float32).reshape((n, 1))

    def split_action(self, out: np.ndarray):
        return out[:, 0].astype(np.int32), out[:, 1:2]

    @property
    def action_width(self) -> int:
        return 1  # the action index

    # -- training --------------------------------------------------------------------------------
    def vector_steps(self) -> int:
        """This run's vector steps (SB3's ``_n_calls``): the target-update clock."""
        return self.num_timesteps // (self.cfg.env.n_envs * self.dist.world)

    def start_rounds(self) -> None:
        self._trained_calls = self.vector_steps()  # a resumed run: the checkpoint's step, after its round's updates

    def due_cells(self):
        """The target updates due since the last round (SB3 runs them during collection, while the
        Q-network does not change: the same updates, each one graph call)."""
        every = max(self.cfg.algo.target_update_interval // self.cfg.env.n_envs, 1)
        calls = self.vector_steps()
        due = ["target"] * (calls // every - self._trained_calls // every)
        self._trained_calls = calls
        return due

    def update_kind(self, n_update: int) -> str:
        return "q"

    def summarize(self, stats):
        s = np.stack([v for _, v in stats])
        return {"loss": float(s[:, 0].mean()), "q_mean": float(s[:, 1].mean()), "grad_norm": float(s[:, 2].mean()),
                "exploration_rate": self.exploration_rate()}
