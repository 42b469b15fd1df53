"""Recurrent PPO (``policy.recurrent``): the acting and value cells with the LSTM state as inputs
and outputs, the loss over whole sequences with backpropagation through time, and the host
side of the state (:class:`Carry`, :class:`SequenceBuffer`).

The state convention is sb3-contrib's: ``episode_start`` is 1.0 on the first step of an episode
and the cells zero the incoming state there (networks/lstm.py). The rollout keeps, per env, the
actor's and the critic's (h, c) as one row ``[h_actor | c_actor | h_critic | c_critic]``.

Minibatches are whole sequences of envs (CleanRL's ppo_atari_lstm): each minibatch is
``batch_size / n_steps`` envs' complete rollouts, started from the state each env had at the
start of the rollout, with the reset rule applied where episodes started inside it. With
``algo.bptt_steps`` L < n_steps each env's rollout is cut into n_steps / L sequences of L steps,
each started from the state the rollout had at its first step (truncated backpropagation
through time, for rollouts too long to unroll in one graph); a minibatch is batch_size / L of
them. Why not
sb3-contrib's padded sequences: static shapes (one compiled graph for the whole update phase,
no padding masks), and with RL Zoo's recurrent recipes (batch_size = n_steps * n_envs) both are
the same computation: every env's whole rollout, the state reset at episode starts.
"""
from __future__ import annotations

import numpy as np
from mindspore import Tensor, nn, ops

from msrl_consistent.buffers import RolloutBuffer
from msrl_consistent.config import ConfigError
from msrl_consistent.networks.lstm import LSTM

from .ppo_update import ClippedObjective


def split_state(state, n: int):
    """``[h_actor | c_actor | h_critic | c_critic]`` (B, 4n) -> its four (B, n) parts."""
    return state[:, :n], state[:, n:2 * n], state[:, 2 * n:3 * n], state[:, 3 * n:]


class RecurrentRollout(nn.Cell):
    """One graph call per vector step: (obs, state, episode_start, noise) -> (env action, action,
    log_prob, value, next state). The actor path is the exported RecurrentPolicyCell's ops at the
    same shapes (its LSTM cell and actor network), so the state a deployed policy carries is the
    state the training rollout carried."""

    def __init__(self, agent):
        super().__init__()
        self.agent = agent
        self.dist = agent.distribution()
        self.n = agent.lstm_actor.hidden

    def construct(self, obs, state, episode_start, noise):
        x = self.agent.encode(obs)
        h_a, c_a, h_c, c_c = split_state(state, self.n)
        h_a, c_a = self.agent.lstm_actor(x, h_a, c_a, episode_start)
        h_c, c_c = self.agent.lstm_critic(x, h_c, c_c, episode_start)
        value = self.agent.critic(h_c).squeeze(-1)
        env_a, a, logp = self.dist.sample(self.agent.dist_params(h_a), noise)
        return env_a, a, logp, value, ops.concat((h_a, c_a, h_c, c_c), 1)


class RecurrentValue(nn.Cell):
    """V(obs) after one critic LSTM step: (obs, state, episode_start) -> value (B,)."""

    def __init__(self, agent):
        super().__init__()
        self.agent = agent
        self.n = agent.lstm_actor.hidden

    def construct(self, obs, state, episode_start):
        _, _, h_c, c_c = split_state(state, self.n)
        h_c, _ = self.agent.lstm_critic(self.agent.encode(obs), h_c, c_c, episode_start)
        return self.agent.critic(h_c).squeeze(-1)


class PairedUnroll(nn.Cell):
    """The actor and the critic LSTM over sequences at once: their weights stacked on a leading
    axis of 2, one BatchMatMul and one set of elementwise kernels per step for both (half the
    kernels of two separate unrolls; the recurrence is a Python loop over the constant T, unrolled
    in the graph: backpropagation through time).

    The gate scale of LSTM.cell (the candidate's block times 2) is applied once to the input
    gates and to W_hh instead of at every step: scaling by 1 or 2 is exact, so this is LSTM.cell's
    arithmetic (the BatchMatMul in place of MatMul may round the last bit differently; the
    update recomputes the rollout's probabilities within 1e-5, tested)."""

    def __init__(self, actor: LSTM, critic: LSTM, steps: int):
        super().__init__()
        self.actor, self.critic = actor, critic
        self.steps = steps
        self.hidden = actor.hidden
        self.bmm = ops.BatchMatMul(transpose_b=True)

    def construct(self, x, episode_starts, state0):
        """x (B * T, D) env-major, episode_starts (B, T), state0 (B, 4n) -> the actor's and the
        critic's h at every step, each (B * T, n)."""
        b, n, steps = episode_starts.shape[0], self.hidden, self.steps
        scale = self.actor.gate_scale
        w_ih = ops.stack((self.actor.w_ih, self.critic.w_ih))                    # (2, 4n, D)
        bias = ops.stack((self.actor.bias, self.critic.bias)).expand_dims(1)     # (2, 1, 4n)
        w_hh = ops.stack((self.actor.w_hh, self.critic.w_hh)) * scale.reshape((1, -1, 1))
        xx = ops.broadcast_to(x.expand_dims(0), (2,) + x.shape)
        gx = ((self.bmm(xx, w_ih) + bias) * scale).reshape((2, b, steps, 4 * n))
        h_a, c_a, h_c, c_c = split_state(state0, n)
        h, c = ops.stack((h_a, h_c)), ops.stack((c_a, c_c))                       # (2, B, n)
        # one Unstack and one Split for the whole sequence, not two slices per step (and, in the
        # backward, one Stack, not a zero-padded slice gradient per step summed by AddN)
        gxs = ops.unstack(gx, axis=2)                                            # T x (2, B, 4n)
        keeps = ops.split(1.0 - episode_starts, 1, axis=1)                       # T x (B, 1)
        outs = []
        for t in range(steps):
            keep = keeps[t]
            y = self.actor.sigmoid(gxs[t] + self.bmm(h * keep, w_hh))  # LSTM.cell's activations
            i, f, s, o = ops.split(y, n, axis=-1)
            c = f * (c * keep) + i * (2.0 * s - 1.0)
            h = o * self.actor.tanh_c(c)
            outs.append(h)
        # Unstack, not feats[0] / feats[1]: CPU StridedSlice copies element by element, and the
        # gradients of two slices are two zero-padded tensors summed by AddN
        feats_a, feats_c = ops.unstack(ops.stack(outs, 2), axis=0)                # 2 x (B, T, n)
        return feats_a.reshape((b * steps, n)), feats_c.reshape((b * steps, n))


class RecurrentPPOLoss(nn.Cell):
    """PPO's loss over minibatches of env sequences: the rollout arrays as (B, T, ...), the
    episode starts (B, T) and the state at the rollout's start (B, 4n); the clipped objective,
    value loss and statistics are PPO's (ppo_update.ClippedObjective) on the flattened steps."""

    def __init__(self, agent, c, steps: int):
        super().__init__()
        self.agent = agent
        self.dist = agent.distribution()
        self.objective = ClippedObjective(c)
        self.steps = steps
        self.unroll = PairedUnroll(agent.lstm_actor, agent.lstm_critic, steps)

    def construct(self, obs, actions, old_log_prob, advantages, returns, old_values, episode_starts, state0,
                  clip_range, clip_range_vf):
        b = obs.shape[0]
        x = self.agent.encode(obs.reshape((b * self.steps, -1)))
        feats_a, feats_c = self.unroll(x, episode_starts, state0)
        values = self.agent.critic(feats_c).squeeze(-1)
        flat_actions = actions.reshape((b * self.steps,) + actions.shape[2:])
        log_prob, entropy = self.dist.log_prob_entropy(self.agent.dist_params(feats_a), flat_actions)
        return self.objective(values, log_prob, entropy, old_log_prob.reshape(-1), advantages.reshape(-1),
                              returns.reshape(-1), old_values.reshape(-1), clip_range, clip_range_vf)


def sequence_length(cfg) -> int:
    """The update's sequence length: ``algo.bptt_steps`` (a divisor of n_steps), n_steps when None."""
    c = cfg.algo
    if c.bptt_steps is None:
        return c.n_steps
    if c.n_steps % c.bptt_steps:
        divisors = [d for d in range(1, c.n_steps + 1) if c.n_steps % d == 0]
        shown = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12 else "")
        raise ConfigError(f"key 'algo.bptt_steps' has value {c.bptt_steps}; the rollout's n_steps = {c.n_steps} "
                          f"steps per env are cut into sequences of bptt_steps, so it must divide n_steps: one of "
                          f"{shown}")
    return c.bptt_steps


def sequence_minibatch(cfg) -> int:
    """Sequences per minibatch (``batch_size / bptt_steps``), or a ConfigError naming the valid sizes."""
    c, n_envs = cfg.algo, cfg.env.n_envs
    seq = sequence_length(cfg)
    count = n_envs * (c.n_steps // seq)
    if c.batch_size % seq or not 1 <= c.batch_size // seq <= count:
        valid = ", ".join(str(k * seq) for k in range(1, min(count, 8) + 1)) + (", ..." if count > 8 else "")
        if seq == c.n_steps:
            what = (f"whole sequences of n_steps = {c.n_steps} steps per env, so batch_size must be n_steps times "
                    f"a number of envs from 1 to env.n_envs = {n_envs}")
        else:
            what = (f"sequences of algo.bptt_steps = {seq} steps ({count} per rollout), so batch_size must be "
                    f"bptt_steps times a number of sequences from 1 to {count}")
        raise ConfigError(f"key 'algo.batch_size' has value {c.batch_size}; a recurrent policy trains on {what}: "
                          f"one of {valid}")
    return c.batch_size // seq


class SequenceBuffer(RolloutBuffer):
    """The rollout buffer of a recurrent policy: also each step's episode_start flags and every
    env's state at the first step of each sequence (every ``seq_len`` steps: the rollout's start
    when seq_len is n_steps); ``sequences`` gives the arrays sequence-major."""

    def __init__(self, n_steps: int, n_envs: int, obs_dim: int, act_shape: tuple, discrete: bool, obs_dtype,
                 state_dim: int, seq_len: int = 0):
        super().__init__(n_steps, n_envs, obs_dim, act_shape, discrete, obs_dtype)
        self.seq_len = seq_len or n_steps
        self.episode_starts = np.zeros((n_steps, n_envs), np.float32)
        self.state0 = np.zeros((n_steps // self.seq_len, n_envs, state_dim), np.float32)

    def sequences(self) -> dict:
        """``by_step`` and the episode starts as (sequences, seq_len, ...), env-major (env 0's
        sequences first, in time order), and each sequence's initial state (sequences, state_dim)."""
        arrays = dict(self.by_step(), episode_starts=self.episode_starts)
        k, n_envs = self.state0.shape[0], self.state0.shape[1]

        def cut(a):  # (k * L, n_envs, ...) -> (n_envs * k, L, ...)
            a = a.reshape((k, self.seq_len, n_envs) + a.shape[2:])
            return np.ascontiguousarray(np.moveaxis(a, 2, 0)).reshape((n_envs * k, self.seq_len) + a.shape[3:])
        out = {key: cut(a) for key, a in arrays.items()}
        out["state0"] = np.ascontiguousarray(np.swapaxes(self.state0, 0, 1)).reshape(n_envs * k, -1)
        return out


class Carry:
    """The host side of the rollout's recurrent state: per env the state row and the
    episode_start flag the next step's cells take. A training run's envs start new episodes
    when (re)seeded, so the state starts at zero with every flag at 1 (sb3-contrib's start)."""

    def __init__(self, n_envs: int, state_dim: int):
        self.state = np.zeros((n_envs, state_dim), np.float32)
        self.starts = np.ones(n_envs, np.float32)
        self.next_state = self.state

    def begin(self, buf: SequenceBuffer) -> None:
        buf.state0[0] = self.state

    def inputs(self, obs: np.ndarray, noise: np.ndarray) -> tuple:
        return Tensor(obs), Tensor(self.state), Tensor(self.starts), Tensor(noise)

    def acted(self, buf: SequenceBuffer, t: int, next_state: np.ndarray) -> None:
        """After the rollout call of step t: its flags into the buffer (and, where a sequence
        starts, the state the step was given), the next state kept."""
        buf.episode_starts[t] = self.starts
        if t % buf.seq_len == 0:
            buf.state0[t // buf.seq_len] = self.state
        self.next_state = np.ascontiguousarray(next_state, np.float32)

    def final_values(self, value_fn, real_next: np.ndarray) -> np.ndarray:
        """V of the true final observations with the state that led to them (no reset)."""
        zeros = np.zeros_like(self.starts)
        return value_fn(Tensor(real_next), Tensor(self.next_state), Tensor(zeros)).asnumpy()

    def stepped(self, done: np.ndarray) -> None:
        """After the env step: the next state is current; ended envs start an episode next step."""
        self.state = self.next_state
        self.starts = done.astype(np.float32)

    def values(self, value_fn, obs: np.ndarray) -> np.ndarray:
        """V of the current observations (the rollout's bootstrap), the reset rule applied."""
        return value_fn(Tensor(obs), Tensor(self.state), Tensor(self.starts)).asnumpy()
