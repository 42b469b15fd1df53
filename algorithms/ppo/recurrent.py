"""Recurrent PPO (``policy.recurrent``): the acting and value cells with the LSTM state as inputs
and outputs, the loss over whole sequences with backpropagation through time (the host side of
the state is on_policy.Carry, its buffer buffers.SequenceBuffer).

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

from mindspore import nn, ops

from msrl_consistent.config import ConfigError
from msrl_consistent.networks.lstm import LSTM

from .update import ClippedObjective


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
        x = self.agent.features(obs)
        h_a, c_a, h_c, c_c = split_state(state, self.n)
        h_a, c_a = self.agent.lstm_actor(x, h_a, c_a, episode_start)
        h_c, c_c = self.agent.lstm_critic(x, h_c, c_c, episode_start)
        value = self.agent.value(h_c)
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
        h_c, _ = self.agent.lstm_critic(self.agent.features(obs), h_c, c_c, episode_start)
        return self.agent.value(h_c)


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
    value loss and statistics are PPO's (update.ClippedObjective) on the flattened steps."""

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
        x = self.agent.features(obs.reshape((b * self.steps, -1)))
        feats_a, feats_c = self.unroll(x, episode_starts, state0)
        values = self.agent.value(feats_c)
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
