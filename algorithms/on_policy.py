"""The on-policy loop (PPO): collect ``n_steps`` vector steps with one graph call each into a
RolloutBuffer, bootstrap truncated episodes and the last step with the value cell, compute
GAE, then run the algorithm's ``train`` on the rollout."""
from __future__ import annotations

import time
from typing import Dict, Optional

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from msrl_consistent.buffers import RolloutBuffer
from msrl_consistent.deploy import FrameStack
from msrl_consistent.distributions import Distribution
from msrl_consistent.envs import make_vec_env, seed_vec_env, step_transitions
from msrl_consistent.fastcall import FastCall
from msrl_consistent.normalization import RewardNormalizer

from .algorithm import Algorithm
from .recurrent import Carry, SequenceBuffer
from .run import RunContext


class PackedRollout(nn.Cell):
    """The rollout cell's four outputs as one float32 matrix ``[env action | action | log_prob |
    value]`` (integer actions are exact in float32): one device-to-host copy per vector step
    instead of four (each ``asnumpy`` costs tens of microseconds of host work). A population's
    outputs (members, envs, ...) become members * envs rows, member after member."""

    def __init__(self, cell: nn.Cell):
        super().__init__()
        self.cell = cell

    def construct(self, obs, *rest):
        outs = self.cell(obs, *rest)  # (noise), or a recurrent cell's (state, episode_start, noise)
        env_a, a, logp, v = outs[0], outs[1], outs[2], outs[3]
        n = obs.shape[0] if logp.ndim == 1 else logp.shape[0] * logp.shape[1]  # a population's (members, envs) rows
        parts = [env_a.astype(ms.float32).reshape((n, -1)), a.astype(ms.float32).reshape((n, -1)),
                 logp.reshape((n, 1)), v.reshape((n, 1))]
        if len(outs) == 5:  # the rows the buffer stores instead of the observations (preprocessed frames), or the next state
            parts.append(outs[4])
        return ops.concat(parts, 1)


def unpack_rollout(out: np.ndarray, act_shape: tuple, discrete: bool):
    """PackedRollout's matrix -> (env action, action, log_prob, value, stored rows or None) in the
    rollout cell's dtypes."""
    n, width = out.shape[0], int(np.prod(act_shape, dtype=np.int64))
    env_a, a = out[:, :width].reshape((n,) + act_shape), out[:, width:2 * width].reshape((n,) + act_shape)
    if discrete:
        env_a = a = a.astype(np.int32)
    rows = out[:, 2 * width + 2:] if out.shape[1] > 2 * width + 2 else None
    return env_a, a, out[:, 2 * width], out[:, 2 * width + 1], rows


class OnPolicyAlgorithm(Algorithm):
    """Rollout collection shared by on-policy methods. Subclasses set ``rollout_cell``
    ((obs, noise) -> (env_action, action, log_prob, value)) and ``value_cell`` in ``build``
    and implement ``train(buffer) -> stats``."""

    n_steps: int = 0
    gamma: float = 0.99
    gae_lambda: float = 0.95
    rollout_cell: nn.Cell
    value_cell: nn.Cell
    rollout_features: int = 0
    """> 0: the rollout cell's fifth output has this width and the buffer stores it instead of the
    observations (PPO's preprocessed image frames)."""

    state_dim: int = 0
    """> 0: the policy is recurrent; the rollout cell takes (obs, state, episode_start, noise) and its
    fifth output is the next state of this width (recurrent.py: Carry, SequenceBuffer)."""
    seq_len: int = 0
    """A recurrent policy's update sequence length (steps per sequence the SequenceBuffer cuts; 0:
    the whole rollout)."""

    distribution: Distribution
    """The action distribution (set in ``build``): its ``noise`` is what the rollout graph samples with."""

    def sample_noise(self, n: int) -> np.ndarray:
        """Host-side noise for ``n`` rows of the rollout graph, from the run's Generator."""
        return self.distribution.noise(self.rng, n)

    def step_noise(self, t: int, n: int) -> np.ndarray:
        """The noise of vector step t of a rollout (t = 0 at each rollout's start): sample_noise
        unless the algorithm keeps noise across steps (PPO's gSDE)."""
        return self.sample_noise(n)

    def values_of(self, obs: np.ndarray) -> np.ndarray:
        return self._value_fn(Tensor(np.asarray(obs, np.float32))).asnumpy()

    reward_norm: Optional[RewardNormalizer] = None

    def extra_state(self) -> Dict[str, np.ndarray]:
        if self.reward_norm is None:
            return {}
        return {f"host/ret_rms/{k}": v for k, v in self.reward_norm.state().items()}

    def load_extra_state(self, tensors: Dict[str, np.ndarray]) -> None:
        if self.cfg.env.normalize_reward and "host/ret_rms/mean" in tensors:
            self._reward_normalizer(self.cfg.env.n_envs).load(
                {k: tensors[f"host/ret_rms/{k}"] for k in ("mean", "var", "count")})

    def _reward_normalizer(self, n_envs: int) -> RewardNormalizer:
        if self.reward_norm is None:
            gather = self.dist.allgather if self.dist.world > 1 else None
            self.reward_norm = RewardNormalizer(n_envs, self.gamma, self.cfg.env.normalize_reward_clip, gather=gather)
        return self.reward_norm

    def learn_loop(self, run: RunContext) -> None:
        cfg = self.cfg
        self._rollout_fn = FastCall(PackedRollout(self.rollout_cell))
        self._value_fn = FastCall(self.value_cell)
        venv = make_vec_env(cfg.env)
        n_envs = venv.num_envs
        act_shape = self.spec.action_shape
        stored = self.rollout_features
        obs_dtype = np.dtype(np.float32 if stored else self.spec.input_dtype)
        carry = Carry(n_envs, self.state_dim) if self.state_dim else None
        if carry is None:
            buf = RolloutBuffer(self.n_steps, n_envs, stored or self.spec.obs_dim, act_shape, self.spec.discrete,
                                obs_dtype)
        else:
            buf = SequenceBuffer(self.n_steps, n_envs, self.spec.obs_dim, act_shape, self.spec.discrete, obs_dtype,
                                 self.state_dim, self.seq_len)
        # k > 1: the rows the cells see are the k latest observations (deploy.FrameStack, as deployed)
        stack = FrameStack(self.spec.frame_stack, self.spec.frame_dim) if self.spec.frame_stack > 1 else None
        steps_per_vector_step = n_envs * self.dist.world  # num_timesteps counts every rank's steps
        obs = seed_vec_env(venv, self.env_seed())
        if stack is not None:
            obs = stack.reset(obs)
        ep_ret = np.zeros(n_envs, np.float64)
        ep_len = np.zeros(n_envs, np.int64)
        reward_norm = self._reward_normalizer(n_envs) if cfg.env.normalize_reward else None
        if reward_norm is not None:
            reward_norm.returns = np.zeros(n_envs, np.float64)  # (re)seeded envs start new episodes
        phases = run.phases
        clock = time.perf_counter
        try:
            while self.num_timesteps < cfg.total_timesteps:
                buf.reset()
                if carry is not None:
                    carry.begin(buf)
                for t in range(self.n_steps):
                    t0 = clock()
                    noise = self.step_noise(t, n_envs)
                    inputs = (Tensor(obs), Tensor(noise)) if carry is None else carry.inputs(obs, noise)
                    packed = self._rollout_fn(*inputs).asnumpy()
                    env_a, a, logp, v, rows = unpack_rollout(packed, act_shape, self.spec.discrete)
                    if carry is not None:  # the fifth output is the next state, not rows to store
                        carry.acted(buf, t, rows)
                        rows = None
                    t1 = clock()
                    next_obs, rew, term, trunc, real_next = step_transitions(venv, env_a)
                    if stack is not None:
                        real_next = stack.peek(real_next)  # an ended episode's true final stack
                        next_obs = stack.push(next_obs, term | trunc)
                    t2 = clock()
                    r_stored = rew
                    if reward_norm is not None:
                        r_stored = reward_norm.step(rew, term | trunc)
                    buf.add(obs if rows is None else rows, a, logp, v, r_stored, term, trunc)
                    if np.any(trunc):
                        idx = np.nonzero(trunc & ~term)[0]
                        if idx.size:
                            # the whole batch: one graph shape (a subset would compile a graph per size)
                            final = self.values_of(real_next) if carry is None else \
                                carry.final_values(self._value_fn, real_next)
                            buf.set_final_values(t, idx, final[idx])
                    self.num_timesteps += steps_per_vector_step
                    ep_ret += rew
                    ep_len += 1
                    for i in np.nonzero(term | trunc)[0]:
                        run.episode_done(float(ep_ret[i]), int(ep_len[i]))
                        ep_ret[i], ep_len[i] = 0.0, 0
                    obs = next_obs
                    if carry is not None:
                        carry.stepped(term | trunc)
                    phases["env"] += t2 - t1
                    phases["acting"] += clock() - t2 + (t1 - t0)
                t0 = clock()
                if self.obs_rms is not None:  # every rank's rollout, merged in rank order
                    self.obs_rms.update(self.dist.allgather(buf.obs))
                last = self.values_of(obs) if carry is None else carry.values(self._value_fn, obs)
                buf.compute(last, self.gamma, self.gae_lambda)
                stats = self.train(buf)
                # New statistics take effect after the update: frozen during a rollout and its update.
                self.sync_normalizer()
                self.iterations += 1
                run.update_done(clock() - t0)
                run.after_iteration(stats)
        finally:
            venv.close()
