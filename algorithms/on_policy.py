"""What on-policy algorithms (PPO) share: the rollout graph's packed output, the base class and
its hooks, and the loop (:class:`Rollouts`, once for one run and a population): collect
``n_steps`` vector steps with one graph call each into a RolloutBuffer, bootstrap truncated
episodes and the last step with the value cell, compute GAE, then train on the rollout."""
from __future__ import annotations

import time
from typing import Dict, List, Optional

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from msrl_consistent.buffers import RolloutBuffer, SequenceBuffer
from msrl_consistent.deploy import FrameStack
from msrl_consistent.distributions import Distribution
from msrl_consistent.fastcall import FastCall
from msrl_consistent.normalization import RewardNormalizer
from msrl_consistent.pipeline import EnvGroups, EpisodeTally
from msrl_consistent.run_context import RunContext

from .algorithm import Algorithm


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
        for extra in outs[4:]:  # the rows the buffer stores instead of the observations (preprocessed frames,
            parts.append(extra)  # then a frame-wise rollout's new frame), or the next state
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

    frame_wise: bool = False
    """The rollout cell takes (newest raw frame, the k - 1 earlier frames preprocessed, noise): each
    stacked image frame is preprocessed once (PPO's FrameWiseRollout; :class:`FrameCarry`)."""

    state_dim: int = 0
    """> 0: the policy is recurrent; the rollout cell takes (obs, state, episode_start, noise) and its
    fifth output is the next state of this width (:class:`Carry`, buffers.SequenceBuffer)."""
    seq_len: int = 0
    """A recurrent policy's update sequence length (steps per sequence the SequenceBuffer cuts; 0:
    the whole rollout)."""

    distribution: Distribution
    """The action distribution (set in ``build``): its ``noise`` is what the rollout graph samples with."""

    def timestep_unit(self) -> int:
        """A whole rollout: n_steps vector steps of every rank's envs."""
        return self.n_steps * super().timestep_unit()

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
        self._rollout_fn = FastCall(PackedRollout(self.rollout_cell))
        self._value_fn = FastCall(self.value_cell)
        Rollouts([self], stacked=False, owner=self).loop([run])

    # -- the hooks of Rollouts (a population has its own) ------------------------------------------------
    def gae(self):
        """GAE's (gamma, lambda): one run's floats (a population's: one per buffer column)."""
        return self.gamma, self.gae_lambda

    def train_members(self, buf) -> List[Dict[str, float]]:
        return [self.train(buf)]

    def after_update(self, runs: List[RunContext]) -> None:
        """After the members' logs, evaluations and checkpoints (a population acts on a stop here)."""


class Rollouts:
    """The on-policy loop, once for one run and a population: collect ``n_steps`` vector steps
    with one graph call each into a RolloutBuffer, bootstrap truncated episodes and the last step
    with the value cell, compute GAE, then train (one update phase) and log.

    ``members``: one run's algorithm, or a population's K members, whose envs sit side by side in
    one vector env and whose rows side by side in one buffer (member i's columns i * n .. (i + 1) * n,
    seeded as its own run seeds them); ``stacked``: the graphs take them with a leading member
    axis. ``owner`` (the run's algorithm, or the population) holds the graphs (``_rollout_fn``,
    ``_value_fn``, ``values_of``) and the hooks ``gae``, ``train_members`` and ``after_update``.
    A recurrent policy (the run's ``state_dim``) carries its state through :class:`Carry` and a
    frame stack is kept as deployed (deploy.FrameStack); populations refuse both."""

    def __init__(self, members: List, stacked: bool, owner):
        self.members, self.stacked, self.owner = members, stacked, owner

    def loop(self, runs: List[RunContext]) -> None:  # noqa: C901 - SB3's collect/GAE/train cycle, kept in one place
        members, m0, owner = self.members, self.members[0], self.owner
        cfg, spec, k = m0.cfg, m0.spec, len(members)
        n = cfg.env.n_envs
        envs = EnvGroups(cfg.env, k)  # env.pipeline: one group, or two that step while the other acts
        act_shape = spec.action_shape
        stored = m0.rollout_features
        obs_dtype = np.dtype(np.float32 if stored else spec.input_dtype)
        carry = Carry(n, m0.state_dim) if m0.state_dim else None
        frames = FrameCarry(n, stored, m0.rollout_cell.frame_width, spec.frame_stack) if m0.frame_wise else None
        if carry is None:
            buf = RolloutBuffer(m0.n_steps, k * n, stored or spec.obs_dim, act_shape, spec.discrete, obs_dtype)
        else:
            buf = SequenceBuffer(m0.n_steps, n, spec.obs_dim, act_shape, spec.discrete, obs_dtype,
                                 m0.state_dim, m0.seq_len)
        world = m0.dist.world  # num_timesteps counts every rank's steps
        first = envs.reset([m.env_seed() for m in members])
        gobs = [first[c] for c in envs.cols] if envs.overlap else [first]  # each group's current rows
        # k > 1: the rows the cells see are the k latest observations (deploy.FrameStack, as deployed), per
        # group; frame-wise, the cell takes the newest raw frame and the carry holds the k - 1 before it
        stacks = [FrameStack(spec.frame_stack, spec.frame_dim) for _ in gobs] \
            if spec.frame_stack > 1 and frames is None else None
        if stacks is not None:
            gobs = [s.reset(o) for s, o in zip(stacks, gobs)]
        episodes = EpisodeTally(runs, n, envs.reports_games)
        norms = [m._reward_normalizer(n) if cfg.env.normalize_reward else None for m in members]
        for rn in norms:
            if rn is not None:
                rn.returns = np.zeros(n, np.float64)  # (re)seeded envs start new episodes
        clock = time.perf_counter
        acting = env_wait = 0.0
        zeros: List = [None]  # the noise, zero: the acting graph as a value graph
        finals: List = [None] * envs.groups  # frame-wise: each group's final values of its last step
        every = slice(None)  # the acting graph takes every column's rows (pipeline.EnvGroups.widen)

        def noise_of(t: int) -> np.ndarray:  # vector step t's noise for every column, drawn in column order
            return np.concatenate([m.step_noise(t, n) for m in members]) if k > 1 else m0.step_noise(t, n)

        def act(g: int, t: int, noise: np.ndarray):
            """Group g acts at step t (one graph call at the full batch, its rows in their columns) and
            its envs start stepping."""
            nonlocal acting
            t0 = clock()
            o, c = gobs[g], envs.cols[g]
            wide = envs.widen(g, o)
            if zeros[0] is None:
                zeros[0] = np.zeros_like(noise)
            if self.stacked:
                inputs = (Tensor(wide.reshape(k, n, -1)), Tensor(noise.reshape((k, n) + noise.shape[1:])))
            else:
                inputs = carry.inputs(wide, noise, every) if carry is not None else \
                    frames.inputs(wide, noise, every) if frames is not None else (Tensor(wide), Tensor(noise))
            out = envs.narrow(g, owner._rollout_fn(*inputs).asnumpy())
            env_a, a, logp, v, rows = unpack_rollout(out, act_shape, spec.discrete)
            if carry is not None:  # the fifth output is the next state, not rows to store
                carry.acted(buf, t, rows, c)
                rows = None
            elif frames is not None:
                rows = frames.acted(rows, c)
            envs.send(g, env_a)
            acting += clock() - t0
            return (o if rows is None else rows, a, logp, v)

        def frame_values(g: int, o: np.ndarray) -> np.ndarray:
            """Frame-wise: the values of group g's observations ``o`` (newest raw frames) from the acting
            graph (its value output, zero noise; the carry, before it steps, holds their earlier frames): the bits of
            the value graph's (tested), without compiling it (its memory: docs/benchmarks.md)."""
            out = envs.narrow(g, owner._rollout_fn(*frames.inputs(envs.widen(g, o), zeros[0], every)).asnumpy())
            return unpack_rollout(out, act_shape, spec.discrete)[3]

        def receive(g: int):
            """Group g's step results; its rows (and frame stack, recurrent state) move to the next step."""
            nonlocal env_wait
            t0 = clock()
            next_obs, rew, term, trunc, real_next, games = envs.recv(g)
            if stacks is not None:
                real_next = stacks[g].peek(real_next)  # an ended episode's true final stack
                next_obs = stacks[g].push(next_obs, term | trunc)
            env_wait += clock() - t0  # the env phase, as before the groups: the step and the frame stack
            if frames is not None:  # the truncated episodes' final values, while the carry holds their frames
                truncated = np.any(trunc & ~term)
                finals[g] = frame_values(g, real_next) if truncated else np.zeros(len(envs.cols[g]), np.float32)
            for held in (carry, frames):
                if held is not None:
                    held.stepped(term | trunc, envs.cols[g])
            gobs[g] = next_obs
            return rew, term, trunc, real_next, games

        try:
            while m0.num_timesteps < cfg.total_timesteps:
                buf.reset()
                if carry is not None:
                    carry.begin(buf)
                noise = noise_of(0)
                acted = [act(0, 0, noise)] + [None] * (envs.groups - 1)
                for t in range(m0.n_steps):
                    for g in range(1, envs.groups):
                        acted[g] = act(g, t, noise)
                    results, now = [], acted[:]
                    for g in range(envs.groups):
                        results.append(receive(g))
                        if g == 0 and t + 1 < m0.n_steps:  # group 0 acts again while the others step
                            noise = noise_of(t + 1)
                            acted[0] = act(0, t + 1, noise)
                    t0 = clock()
                    o, a, logp, v = (envs.join(list(p)) for p in zip(*now))
                    rew, term, trunc, real_next, games = (envs.join(list(p)) for p in zip(*results))
                    done = term | trunc
                    r_stored = rew
                    if norms[0] is not None:
                        r_stored = np.concatenate([rn.step(rew[i * n:(i + 1) * n], done[i * n:(i + 1) * n])
                                                   for i, rn in enumerate(norms)]) if k > 1 else norms[0].step(rew, done)
                    buf.add(o, a, logp, v, r_stored, term, trunc)
                    idx = np.nonzero(trunc & ~term)[0]
                    if idx.size:
                        # the whole batch: one graph shape (a subset would compile a graph per size)
                        if frames is not None:
                            final = envs.join(finals)
                        elif carry is None:
                            final = owner.values_of(real_next)
                        else:
                            final = carry.final_values(owner._value_fn, real_next)
                        buf.set_final_values(t, idx, final[idx])
                    for m in members:
                        m.num_timesteps += n * world
                    episodes.step(rew, done, games)
                    acting += clock() - t0
                    for run in runs:
                        run.phases["env"] += env_wait
                        run.phases["acting"] += acting
                    acting = env_wait = 0.0
                t0 = clock()
                obs = envs.join(gobs)
                for i, m in enumerate(members):
                    if m.obs_rms is not None:  # every rank's rollout, merged in rank order
                        m.obs_rms.update(m.dist.allgather(buf.obs[:, i * n:(i + 1) * n]))
                if frames is not None:
                    last = envs.join([frame_values(g, o) for g, o in enumerate(gobs)])
                elif carry is None:
                    last = owner.values_of(obs)
                else:
                    last = carry.values(owner._value_fn, obs)
                buf.compute(last, *owner.gae())
                stats = owner.train_members(buf)
                for m in members:
                    m.sync_normalizer()  # new statistics take effect after the update (frozen during a rollout)
                    m.iterations += 1
                dt = clock() - t0
                for run, s in zip(runs, stats):
                    run.update_done(dt)
                    run.after_iteration(s)
                owner.after_update(runs)
        finally:
            envs.close()


class Carry:
    """The host side of the rollout's recurrent state: per env the state row and the
    episode_start flag the next step's cells take. A training run's envs start new episodes
    when (re)seeded, so the state starts at zero with every flag at 1 (sb3-contrib's start).
    ``cols``: the env columns of the group that acts or stepped (pipeline.EnvGroups), or every
    column for the acting graph's inputs."""

    def __init__(self, n_envs: int, state_dim: int):
        self.state = np.zeros((n_envs, state_dim), np.float32)
        self.starts = np.ones(n_envs, np.float32)
        self.next_state = self.state.copy()

    def begin(self, buf: SequenceBuffer) -> None:
        buf.state0[0] = self.state

    def inputs(self, obs: np.ndarray, noise: np.ndarray, cols: np.ndarray) -> tuple:
        return Tensor(obs), Tensor(self.state[cols]), Tensor(self.starts[cols]), Tensor(noise)

    def acted(self, buf: SequenceBuffer, t: int, next_state: np.ndarray, cols: np.ndarray) -> None:
        """After the rollout call of step t: its flags into the buffer (and, where a sequence
        starts, the state the step was given), the next state kept."""
        buf.episode_starts[t, cols] = self.starts[cols]
        if t % buf.seq_len == 0:
            buf.state0[t // buf.seq_len, cols] = self.state[cols]
        self.next_state[cols] = next_state

    def stepped(self, done: np.ndarray, cols: np.ndarray) -> None:
        """After the env step: the next state is current; ended envs start an episode next step."""
        self.state[cols] = self.next_state[cols]
        self.starts[cols] = done.astype(np.float32)

    def final_values(self, value_fn, real_next: np.ndarray) -> np.ndarray:
        """After every group stepped: V of the true final observations with the state that led to
        them (no reset)."""
        zeros = np.zeros_like(self.starts)
        return value_fn(Tensor(real_next), Tensor(self.state), Tensor(zeros)).asnumpy()

    def values(self, value_fn, obs: np.ndarray) -> np.ndarray:
        """V of the current observations (the rollout's bootstrap), the reset rule applied."""
        return value_fn(Tensor(obs), Tensor(self.state), Tensor(self.starts)).asnumpy()


class FrameCarry:
    """The host side of a frame-wise rollout (``frame_wise``): per env the k - 1 most recent
    frames as the rollout cell preprocessed them (oldest first, flattened, ``frame_width``
    values each), which it takes with the newest raw frame. It stands in for the loop's
    deploy.FrameStack of raw frames and gives the cell the same rows: zeros at the start and where
    an episode ended (the stack's zero frames preprocess to zeros), then each step's new frame (the
    rollout cell's last output) after the k - 2 before it. ``cols``: the env columns of the group
    that acts or stepped."""

    def __init__(self, n_envs: int, stored_width: int, frame_width: int, frame_stack: int):
        self.stored, self.width = stored_width, frame_width
        self.previous = np.zeros((n_envs, frame_width * (frame_stack - 1)), np.float32)

    def inputs(self, frames: np.ndarray, noise: np.ndarray, cols: np.ndarray) -> tuple:
        """``frames``: the newest raw frame of each env of ``cols``."""
        return Tensor(np.ascontiguousarray(frames)), Tensor(self.previous[cols]), Tensor(noise)

    def acted(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``rows``: the rollout cell's [stored rows | new frame] -> the stored rows."""
        self.previous[cols] = np.concatenate((self.previous[cols][:, self.width:], rows[:, self.stored:]), 1)
        return rows[:, :self.stored]

    def stepped(self, done: np.ndarray, cols: np.ndarray) -> None:
        self.previous[cols[done]] = 0.0
