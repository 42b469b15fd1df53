"""Proximal Policy Optimization (Schulman et al. 2017), clipped surrogate, GAE(lambda).

Reads top to bottom: config, rollout cell, loss (all of it in PPOLoss.construct), the
compiled update step, and ``train`` (epochs x minibatches over one rollout). The loop,
buffer and policy cell are shared (on_policy.py, buffers.py, networks.py). Defaults follow
Stable-Baselines3; the configs under configs/ppo/ follow RL-Zoo's tuned hyperparameters.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Dict, Literal, Optional

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops

from msrl_consistent.config import NON_NEGATIVE, POSITIVE, UNIT_INTERVAL, Check, ConfigError
from msrl_consistent.distributed import current as current_dist
from msrl_consistent.distributions import (
    categorical_entropy,
    categorical_log_prob,
    categorical_sample,
    gaussian_entropy,
    gaussian_log_prob,
)
from msrl_consistent.networks import MLP, Agent, Chain, dense
from msrl_consistent.normalization import ObsNormalizer

from .algorithm import register, schedule_value
from .on_policy import OnPolicyAlgorithm


@dataclass
class PPOConfig:
    learning_rate: float = 3e-4
    """Adam learning rate (initial value when lr_schedule is linear)."""
    lr_schedule: Literal["constant", "linear"] = "constant"
    """Learning-rate schedule: constant, or linear decay to 0 over total_timesteps."""
    n_steps: int = 2048
    """Steps per environment per rollout (rollout size = n_steps * env.n_envs)."""
    batch_size: int = 64
    """Minibatch size."""
    n_epochs: int = 10
    """Passes over each rollout."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda (bias/variance trade-off of the advantage estimate)."""
    clip_range: float = 0.2
    """Clipping of the probability ratio (initial value when clip_range_schedule is linear)."""
    clip_range_schedule: Literal["constant", "linear"] = "constant"
    """clip_range schedule: constant, or linear decay to 0."""
    clip_range_vf: Optional[float] = None
    """Clip the value prediction around the old value by this much (None: no value clipping)."""
    normalize_advantage: bool = True
    """Normalize advantages per minibatch."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clipping."""
    target_kl: Optional[float] = None
    """Stop the epochs of an update once a minibatch's approx. KL exceeds 1.5 * target_kl (None: never)."""
    adam_eps: float = 1e-5
    """Adam epsilon."""

    checks: ClassVar[Dict[str, Check]] = {
        "learning_rate": POSITIVE, "n_steps": POSITIVE, "batch_size": POSITIVE, "n_epochs": POSITIVE,
        "gamma": UNIT_INTERVAL, "gae_lambda": UNIT_INTERVAL, "clip_range": POSITIVE, "clip_range_vf": POSITIVE,
        "ent_coef": NON_NEGATIVE, "vf_coef": NON_NEGATIVE, "max_grad_norm": POSITIVE, "target_kl": POSITIVE,
        "adam_eps": POSITIVE}


class ActorCriticAgent(Agent):
    """PPO: actor (logits or Gaussian mean), critic V(s), state-independent log std.

    With ``policy.shared`` the two heads sit on one hidden trunk (one Cell object).
    """
    squash = False

    def __init__(self, cfg, spec, rng: np.random.Generator):
        super().__init__()
        pc = cfg.policy
        obs_dim, out = spec.obs_dim, spec.n_actions
        self.spec = spec
        self.normalizer = ObsNormalizer(obs_dim, cfg.env.normalize_obs, cfg.env.normalize_obs_clip)
        if pc.shared:
            trunk = MLP(rng, obs_dim, pc.net_arch, pc.activation, ortho=pc.ortho_init)
            self.actor = Chain(trunk, dense(rng, trunk.out_dim, out, 0.01, pc.ortho_init))
            self.critic = Chain(trunk, dense(rng, trunk.out_dim, 1, 1.0, pc.ortho_init))
        else:
            self.actor = MLP(rng, obs_dim, pc.net_arch, pc.activation, out, 0.01, pc.ortho_init)
            self.critic = MLP(rng, obs_dim, pc.critic_arch or pc.net_arch, pc.activation, 1, 1.0, pc.ortho_init)
        if not spec.discrete:
            self.log_std = Parameter(Tensor(np.full(out, pc.log_std_init, np.float32)), name="log_std")


class PPORollout(nn.Cell):
    """One graph call per vector step: (obs, noise) -> (env action, action, log_prob, value)."""

    def __init__(self, agent):
        super().__init__()
        self.agent = agent
        self.discrete = agent.spec.discrete
        self.n_actions = agent.spec.n_actions
        if not self.discrete:
            self.low = Tensor(agent.spec.act_low)
            self.high = Tensor(agent.spec.act_high)

    def construct(self, obs, noise):
        x = self.agent.normalizer(obs)
        out = self.agent.actor(x)
        value = self.agent.critic(x).squeeze(-1)
        if self.discrete:
            action = categorical_sample(out, noise)
            return action, action, categorical_log_prob(out, action, self.n_actions), value
        log_std = self.agent.log_std
        action = out + ops.exp(log_std) * noise
        # The environment gets the sample clipped to the Box (as SB3); the loss uses the sample.
        return ops.clip_by_value(action, self.low, self.high), action, gaussian_log_prob(out, log_std, action), value


class ValueCell(nn.Cell):
    def __init__(self, agent):
        super().__init__()
        self.agent = agent

    def construct(self, obs):
        return self.agent.critic(self.agent.normalizer(obs)).squeeze(-1)


class PPOLoss(nn.Cell):
    """The whole PPO loss; returns (loss, policy loss, value loss, entropy, approx KL, clip fraction)."""

    def __init__(self, agent, c: PPOConfig):
        super().__init__()
        self.agent = agent
        self.discrete = agent.spec.discrete
        self.n_actions = agent.spec.n_actions
        self.normalize_advantage = c.normalize_advantage
        self.clip_vf = c.clip_range_vf is not None
        self.ent_coef = float(c.ent_coef)
        self.vf_coef = float(c.vf_coef)

    def construct(self, obs, actions, old_log_prob, advantages, returns, old_values, clip_range, clip_range_vf):
        x = self.agent.normalizer(obs)
        out = self.agent.actor(x)
        values = self.agent.critic(x).squeeze(-1)
        if self.discrete:
            log_prob = categorical_log_prob(out, actions, self.n_actions)
            entropy = categorical_entropy(out).mean()
        else:
            log_prob = gaussian_log_prob(out, self.agent.log_std, actions)
            entropy = gaussian_entropy(self.agent.log_std)
        if self.normalize_advantage:
            n = advantages.shape[0]
            centered = advantages - advantages.mean()
            std = ops.sqrt((centered * centered).sum() / (n - 1))  # unbiased, as torch.std
            advantages = centered / (std + 1e-8)
        log_ratio = log_prob - old_log_prob
        ratio = ops.exp(log_ratio)
        surrogate = ops.minimum(advantages * ratio, advantages * ops.clip_by_value(ratio, 1.0 - clip_range, 1.0 + clip_range))
        policy_loss = -surrogate.mean()
        if self.clip_vf:
            values = old_values + ops.clip_by_value(values - old_values, -clip_range_vf, clip_range_vf)
        value_loss = ((returns - values) ** 2).mean()
        loss = policy_loss - self.ent_coef * entropy + self.vf_coef * value_loss
        approx_kl = ((ratio - 1.0) - log_ratio).mean()  # http://joschu.net/blog/kl-approx.html
        clip_fraction = (ops.abs(ratio - 1.0) > clip_range).astype(ms.float32).mean()
        return loss, policy_loss, value_loss, entropy, approx_kl, clip_fraction


class PPOTrainStep(nn.Cell):
    """Loss, gradients, global-norm clipping and the Adam step in one compiled call."""

    def __init__(self, loss: PPOLoss, optimizer: nn.Optimizer, max_grad_norm: float, world: int = 1):
        super().__init__()
        self.optimizer = optimizer
        self.max_grad_norm = float(max_grad_norm)
        self.grad_fn = ops.value_and_grad(loss, None, optimizer.parameters, has_aux=True)
        # Data parallel (msrun): average gradients over ranks before clipping, in the same graph.
        self.distributed = world > 1
        if self.distributed:
            self.reducer = nn.DistributedGradReducer(optimizer.parameters, mean=True, degree=world)

    def construct(self, obs, actions, old_log_prob, advantages, returns, old_values, clip_range, clip_range_vf):
        (loss, pg, vl, ent, kl, cf), grads = self.grad_fn(obs, actions, old_log_prob, advantages, returns,
                                                          old_values, clip_range, clip_range_vf)
        if self.distributed:
            grads = self.reducer(grads)
        grad_norm = ops.sqrt(ops.addn([(g * g).sum() for g in grads]))
        grads = ops.clip_by_global_norm(grads, self.max_grad_norm)
        self.optimizer(grads)
        return ops.stack([loss, pg, vl, ent, kl, cf, grad_norm])


STAT_NAMES = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm")


@register
class PPO(OnPolicyAlgorithm):
    name = "ppo"
    config_cls = PPOConfig
    agent_cls = ActorCriticAgent

    def build(self) -> None:
        c: PPOConfig = self.cfg.algo
        self.dist = current_dist()
        self.n_steps, self.gamma, self.gae_lambda = c.n_steps, c.gamma, c.gae_lambda
        rollout = c.n_steps * self.cfg.env.n_envs
        if c.batch_size > rollout:
            raise ConfigError(f"key 'algo.batch_size' has value {c.batch_size}, expected at most "
                              f"n_steps * env.n_envs = {rollout}")
        if c.normalize_advantage and c.batch_size < 2:
            raise ConfigError("key 'algo.batch_size' must be >= 2 when algo.normalize_advantage is true")
        self.rollout_cell = PPORollout(self.agent)
        self.value_cell = ValueCell(self.agent)
        self.optimizer = nn.Adam(self.agent.trainable_params(), learning_rate=c.learning_rate, eps=c.adam_eps)
        self.optimizers = {"adam": self.optimizer}
        self.step_cell = PPOTrainStep(PPOLoss(self.agent, c), self.optimizer, c.max_grad_norm, self.dist.world)

    def train(self, buf) -> Dict[str, float]:
        c: PPOConfig = self.cfg.algo
        remaining = 1.0 - self.num_timesteps / self.cfg.total_timesteps
        remaining = max(remaining, 0.0)
        lr = schedule_value(c.learning_rate, c.lr_schedule, remaining)
        clip = schedule_value(c.clip_range, c.clip_range_schedule, remaining)
        self.optimizer.learning_rate.set_data(Tensor(lr, ms.float32))
        clip_t = Tensor(clip, ms.float32)
        clip_vf_t = Tensor(c.clip_range_vf or 0.0, ms.float32)
        data = buf.flat()
        n = data["obs"].shape[0]
        stats = []
        stop = False
        epochs = 0
        for _ in range(c.n_epochs):
            epochs += 1
            perm = self.rng.permutation(n)
            for start in range(0, n, c.batch_size):
                idx = perm[start:start + c.batch_size]
                out = self.step_cell(Tensor(data["obs"][idx]), Tensor(data["actions"][idx]),
                                     Tensor(data["log_probs"][idx]), Tensor(data["advantages"][idx]),
                                     Tensor(data["returns"][idx]), Tensor(data["values"][idx]), clip_t, clip_vf_t)
                s = out.asnumpy()
                stats.append(s)
                self.n_updates += 1
                if c.target_kl is not None:
                    # every rank must take the same decision (the update is a collective)
                    kl = float(self.dist.allgather(np.array([s[4]])).mean())
                    if kl > 1.5 * c.target_kl:
                        stop = True
                        break
            if stop:
                break
        mean = np.mean(np.stack(stats), axis=0)
        res = {k: float(v) for k, v in zip(STAT_NAMES, mean)}
        var_ret = np.var(data["returns"])
        res["explained_variance"] = float("nan") if var_ret == 0 else float(1.0 - np.var(data["returns"] - data["values"]) / var_ret)
        res["learning_rate"] = lr
        res["clip_range"] = clip
        res["epochs"] = epochs
        if not self.spec.discrete:
            res["std"] = float(np.exp(self.agent.log_std.asnumpy()).mean())
        return res
