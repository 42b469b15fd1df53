"""Proximal Policy Optimization (Schulman et al. 2017), clipped surrogate, GAE(lambda).

Reads top to bottom: config, rollout cells, loss (PPOLoss, with update.ClippedObjective),
and ``train`` (epochs x minibatches over one rollout). Beside it in this package: the compiled
update step and phase (update.py), the recurrent policy's cells (recurrent.py) and the
population's graphs (population.py, members.py). The agent is networks/actor_critic.py's; the
loop, buffer and policy cell are shared (algorithms/on_policy.py, buffers.py,
msrl_consistent/networks/). The same loss, step, phase and loop train a population's members
on a leading member axis. Defaults follow Stable-Baselines3; the
configs under configs/ppo/ follow RL-Zoo's tuned hyperparameters.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Dict, Literal, Optional

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from msrl_consistent.config import NON_NEGATIVE, POSITIVE, UNIT_INTERVAL, Check, ConfigError
from msrl_consistent.distributed import current as current_dist
from msrl_consistent.distributions import Categorical
from msrl_consistent.fastcall import FastCall
from msrl_consistent.networks.actor_critic import ActorCriticAgent
from msrl_consistent.networks.image import frame_wise_exact
from msrl_consistent.optim import Adam

from ..algorithm import register, schedule_value
from ..on_policy import OnPolicyAlgorithm
from .population import PPOPopulation
from .recurrent import (
    RecurrentPPOLoss,
    RecurrentRollout,
    RecurrentValue,
    sequence_length,
    sequence_minibatch,
)
from .update import (
    CategoricalClippedHead,
    ClippedObjective,
    PPOTrainStep,
    PPOUpdatePhase,
    explained_variance,
    kl_threshold,
    minibatch_indices,
    phase_stats,
    power_of_two,
)

DATA_KEYS = ("obs", "actions", "log_probs", "advantages", "returns", "values")
"""The rollout arrays the loss takes, in its order (a recurrent loss adds two)."""


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
    """Global gradient-norm clipping as torch's clip_grad_norm_ (SB3): gradients scaled by min(max_grad_norm / (norm + 1e-6), 1)."""
    target_kl: Optional[float] = None
    """Early stop as SB3: the first minibatch whose approx. KL (before its step) exceeds 1.5 * target_kl
    is not applied and ends the update phase (None: never)."""
    adam_eps: float = 1e-5
    """Adam epsilon, added to the bias-corrected sqrt(v) as in PyTorch (msrl_consistent.optim.Adam)."""
    use_sde: bool = False
    """Generalized State-Dependent Exploration (SB3's use_sde; Box actions only): the exploration noise is
    latent @ (exp(log_std) * eps) with latent the actor trunk's last hidden features (detached) and eps a
    standard normal matrix per env; log_std has shape (last hidden size, action dim). Export: the mean."""
    sde_sample_freq: int = -1
    """With use_sde: draw new exploration matrices every this many vector steps of a rollout (-1: only at
    the start of each rollout)."""
    bptt_steps: Optional[int] = None
    """Recurrent policies: the length of the sequences the update backpropagates through, a divisor of n_steps
    (None: n_steps, every env's whole rollout). Each sequence starts from the state the rollout had at its
    first step (truncated backpropagation through time); batch_size is then bptt_steps times a number of
    sequences (docs/recurrent.md)."""

    checks: ClassVar[Dict[str, Check]] = {
        "learning_rate": POSITIVE, "n_steps": POSITIVE, "batch_size": POSITIVE, "n_epochs": POSITIVE,
        "gamma": UNIT_INTERVAL, "gae_lambda": UNIT_INTERVAL, "clip_range": POSITIVE, "clip_range_vf": POSITIVE,
        "ent_coef": NON_NEGATIVE, "vf_coef": NON_NEGATIVE, "max_grad_norm": POSITIVE, "target_kl": POSITIVE,
        "adam_eps": POSITIVE, "bptt_steps": POSITIVE,
        "sde_sample_freq": (lambda v: v == -1 or v > 0, "-1 (only at the start of each rollout) or a positive "
                                                        "number of steps")}


class PPORollout(nn.Cell):
    """One graph call per vector step: (obs, noise) -> (env action, action, log_prob, value), with
    ``noise`` from the distribution's ``noise`` (Gumbel, standard normal, gSDE's exploration matrices)."""

    def __init__(self, agent):
        super().__init__()
        self.agent = agent
        self.dist = agent.distribution()

    def construct(self, obs, noise):
        x = self.agent.features(obs)
        value = self.agent.value(x)
        env_action, action, log_prob = self.dist.sample(self.agent.dist_params(x), noise)
        return env_action, action, log_prob, value


class PreEncodedRollout(nn.Cell):
    """The rollout cell of an image policy: the raw frame rows are preprocessed once (the
    encoder's ``preprocess``: the exported cell's own ops), the policy runs on them (PPORollout:
    the agent's ``features`` of preprocessed rows are the encoder's trunk's, then the heads), and
    the preprocessed rows are a fifth output, flattened, which the rollout buffer stores for the
    update phase. The numbers are the ones ``encoder(raw)`` gives (``trunk(preprocess(raw))``)."""

    def __init__(self, agent):
        super().__init__()
        self.agent = agent
        self.inner = PPORollout(agent)

    def construct(self, obs, noise):
        pre = self.agent.rows.preprocess(obs)
        env_a, a, logp, v = self.inner(pre, noise)
        return env_a, a, logp, v, self.agent.rows.stored(pre)


class FrameWiseRollout(nn.Cell):
    """The rollout cell of a policy on stacked image frames: ``(frame, previous, noise)``, the
    newest raw frame of each row and the k - 1 earlier frames as this cell preprocessed them at
    the steps before (oldest first, flattened; zeros where the episode has not shown them, as the
    frame stack's zeros preprocess to). Only the new frame is preprocessed (the encoder's
    ``preprocess_frame``, bit for bit its slice of the whole stack's ``preprocess``), so each
    frame is preprocessed once, not k times; then PreEncodedRollout's outputs, the fifth the
    stored rows of the stack (the buffer's), the sixth the new frame preprocessed (``frame_width``
    values; the loop keeps the k - 1 latest for the next step, on_policy.FrameCarry)."""

    def __init__(self, agent):
        super().__init__()
        self.agent = agent
        self.inner = PPORollout(agent)
        self.frame_width = agent.rows.encoder.preprocessed_dim // agent.rows.encoder.frames

    def construct(self, frame, previous, noise):
        new = self.agent.rows.preprocess_frame(frame).reshape((frame.shape[0], -1))
        stored = self.agent.rows.stored(ops.concat((previous, new), 1))
        env_a, a, logp, v = self.inner(stored, noise)
        return env_a, a, logp, v, stored, new


class ValueCell(nn.Cell):
    def __init__(self, agent):
        super().__init__()
        self.agent = agent

    def construct(self, obs):
        return self.agent.critic(self.agent.normalizer(obs)).squeeze(-1)


class PPOLoss(nn.Cell):
    """The whole PPO loss; returns update.ClippedObjective's outputs (loss, its parts, statistics):
    one forward pass for both heads, then update.ClippedObjective. ``agent`` is one run's
    ActorCriticAgent or a population's (members.MembersAgent: the same interface, its
    networks and arrays with a leading member axis, every output one per member); ``coefs`` the
    population's per-member ent_coef and vf_coef."""

    def __init__(self, agent, c: PPOConfig, coefs: Optional[dict] = None):
        super().__init__()
        self.agent = agent
        self.dist = agent.distribution()
        self.objective = ClippedObjective(c, coefs)
        # A Discrete action without entropy bonus or value clipping: the loss head with its backward
        # written out (the same gradients, fewer kernels) for minibatches of 2^k rows
        self.lean = isinstance(self.dist, Categorical) and not self.objective.use_ent and c.clip_range_vf is None
        vf_coef = (coefs or {}).get("vf_coef", c.vf_coef)
        self.head = CategoricalClippedHead(self.dist.n, vf_coef, per_member=np.ndim(vf_coef) > 0) if self.lean else None

    def construct(self, obs, actions, old_log_prob, advantages, returns, old_values, clip_range, clip_range_vf):
        x = self.agent.features(obs)  # one encoder pass (and one backward) for both heads
        values = self.agent.value(x)
        params = self.agent.dist_params(x)
        if self.lean and power_of_two(advantages.shape[-1]):  # static: one of the two paths is compiled
            out = self.head(params[0], values, actions, old_log_prob, self.objective.normalized(advantages),
                            returns, clip_range)
            return out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]
        log_prob, entropy = self.dist.log_prob_entropy(params, actions)
        return self.objective(values, log_prob, entropy, old_log_prob, advantages, returns, old_values, clip_range,
                              clip_range_vf)


@register
class PPO(OnPolicyAlgorithm):
    name = "ppo"
    config_cls = PPOConfig
    agent_cls = ActorCriticAgent
    data_parallel = True
    population = PPOPopulation
    """Several seeds trained in one process (``msrl train CONFIG --seeds 0-4``)."""

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
        self.distribution = self.agent.distribution()
        self.recurrent = self.agent.recurrent
        if self.recurrent:  # minibatches of env sequences (recurrent.py)
            self.seq_len = sequence_length(self.cfg)
            rows = self.cfg.env.n_envs * (c.n_steps // self.seq_len)
            self.minibatch_rows = sequence_minibatch(self.cfg)
            self.state_dim = 4 * self.agent.state_size  # [h_actor | c_actor | h_critic | c_critic]
            self.rollout_cell, self.value_cell = RecurrentRollout(self.agent), RecurrentValue(self.agent)
            loss = RecurrentPPOLoss(self.agent, c, self.seq_len)
            self.data_keys = DATA_KEYS + ("episode_starts", "state0")
        else:
            rows, self.minibatch_rows = rollout, c.batch_size
            # width of the rows the buffer stores instead of the observations (the preprocessed frames)
            self.rollout_features = self.agent.rows.stored_width
            self.rollout_cell = PreEncodedRollout(self.agent) if self.rollout_features else PPORollout(self.agent)
            self.value_cell = ValueCell(self.agent)
            loss = self.make_loss(self.agent)
            self.data_keys = DATA_KEYS
        self.optimizer = Adam(self.agent.trainable_params(), learning_rate=c.learning_rate, eps=c.adam_eps)
        self.optimizers = {"adam": self.optimizer}
        self.step_cell = PPOTrainStep(loss, self.optimizer, c.max_grad_norm, self.dist.world,
                                      early_stop=c.target_kl is not None)
        # One graph call per update phase; data-parallel runs keep one call per minibatch (their
        # target_kl decision averages approx KL over the ranks on the host).
        self.fused = self.dist.world == 1
        self.phase_cell = PPOUpdatePhase(self.step_cell, c.n_epochs, rows, self.minibatch_rows) if self.fused else None
        self._phase_fn = FastCall(self.phase_cell) if self.fused else None

    def learn_loop(self, run) -> None:
        # stacked image frames: each frame preprocessed once, at the step it arrives, where that
        # gives the bits of the whole stack's preprocessing at the rollout's batch sizes
        if self.rollout_features and self.spec.frame_stack > 1 and frame_wise_exact(
                self.agent.rows.encoder, [self.cfg.env.n_envs]):  # the acting graph's batch in either pipeline
            self.frame_wise, self.rollout_cell = True, FrameWiseRollout(self.agent)
        super().learn_loop(run)

    def make_loss(self, agent, coefs: Optional[dict] = None) -> nn.Cell:
        """PPOLoss of ``agent``: this run's, or a population's MembersAgent with its members'
        coefficients (population.PPOPopulation)."""
        return PPOLoss(agent, self.cfg.algo, coefs)

    def step_noise(self, t: int, n: int) -> np.ndarray:
        """The rollout graph's noise at vector step t of a rollout. gSDE, as SB3's collect_rollouts:
        new exploration matrices (n, latent_dim, actions), standard normal from the run's Generator,
        at the start of each rollout and every sde_sample_freq steps when it is positive; the
        same matrices in between. Checkpoints fall between rollouts, so a resume draws the same."""
        c: PPOConfig = self.cfg.algo
        if not c.use_sde:
            return self.sample_noise(n)
        if t == 0 or (c.sde_sample_freq > 0 and t % c.sde_sample_freq == 0):
            self._sde_eps = self.distribution.noise(self.rng, n)
        return self._sde_eps

    def train(self, buf) -> Dict[str, float]:
        """The update phase over one rollout: n_epochs passes of shuffled minibatches."""
        c: PPOConfig = self.cfg.algo
        remaining = max(1.0 - self.num_timesteps / self.cfg.total_timesteps, 0.0)
        lr = schedule_value(c.learning_rate, c.lr_schedule, remaining)
        clip = schedule_value(c.clip_range, c.clip_range_schedule, remaining)
        data = buf.sequences() if self.recurrent else buf.flat()
        if self.fused:
            stats, epochs = self._train_fused(data, lr, clip)
        else:
            stats, epochs = self._train_per_minibatch(data, lr, clip)
        res = phase_stats(stats)
        res["explained_variance"] = explained_variance(data["returns"], data["values"])
        res["learning_rate"] = lr
        res["clip_range"] = clip
        res["epochs"] = epochs
        if not self.spec.discrete:
            res["std"] = float(np.exp(self.agent.log_std.asnumpy()).mean())
        return res

    def _train_fused(self, data, lr: float, clip: float):
        """Every minibatch in one graph call (PPOUpdatePhase); returns (stats rows, epochs run)."""
        c: PPOConfig = self.cfg.algo
        n = data["obs"].shape[0]
        rng_state = self.rng.bit_generator.state
        full, tail = minibatch_indices(self.rng, n, self.minibatch_rows, c.n_epochs)
        stats, n_run = self._phase_fn(
            Tensor(full), Tensor(tail), Tensor(lr, ms.float32), Tensor(clip, ms.float32),
            Tensor(c.clip_range_vf or 0.0, ms.float32), Tensor(kl_threshold(c.target_kl), ms.float32),
            # the rollout's arrays as they are, not copied (an image rollout's observations are ~110 MiB)
            *(Tensor.from_numpy(np.ascontiguousarray(data[k])) for k in self.data_keys))
        n_run = int(n_run.asnumpy())
        stats = stats.asnumpy()[:n_run]
        epochs = (n_run - 1) // self.phase_cell.per_epoch_all + 1
        if epochs < c.n_epochs:
            # target_kl stopped the phase: the per-minibatch loop draws only the permutations of the
            # epochs it runs. Rewind the Generator and draw those, so the random stream is the same.
            self.rng.bit_generator.state = rng_state
            for _ in range(epochs):
                self.rng.permutation(n)
        stopped = c.target_kl is not None and stats[-1, 4] > kl_threshold(c.target_kl)
        self.n_updates += n_run - int(stopped)  # optimizer steps applied
        return stats, epochs

    def _train_per_minibatch(self, data, lr: float, clip: float):
        """One graph call per minibatch (data-parallel runs); returns (stats rows, epochs run)."""
        c: PPOConfig = self.cfg.algo
        # in place: the step graph has control flow (target_kl), which does not see a set_data
        self.optimizer.learning_rate.copy_(Tensor(lr, ms.float32))
        clip_t = Tensor(clip, ms.float32)
        clip_vf_t = Tensor(c.clip_range_vf or 0.0, ms.float32)
        threshold = kl_threshold(c.target_kl)
        kl_t = Tensor(threshold, ms.float32)
        n = data["obs"].shape[0]
        stats = []
        for epoch in range(c.n_epochs):
            perm = self.rng.permutation(n)
            for start in range(0, n, self.minibatch_rows):
                idx = perm[start:start + self.minibatch_rows]
                s = self.step_cell(clip_t, clip_vf_t, kl_t, *(Tensor(data[k][idx]) for k in self.data_keys)).asnumpy()
                stats.append(s)
                # s[4] is the ranks' mean approx KL: every rank takes the same decision
                if s[4] > threshold:  # the step was not applied; the phase ends (SB3's target_kl)
                    return np.stack(stats), epoch + 1
                self.n_updates += 1
        return np.stack(stats), c.n_epochs
