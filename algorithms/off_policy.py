"""The off-policy loop shared by SAC and TD3 (as Stable-Baselines3's OffPolicyAlgorithm), its
config section, and the packed batch layout of one gradient step."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar, Dict, List, Literal, Optional, Tuple

import numpy as np
from mindspore import Tensor, nn

from msrl_consistent.buffers import ReplayBuffer
from msrl_consistent.config import NON_NEGATIVE, POSITIVE, UNIT_INTERVAL, Check, ConfigError
from msrl_consistent.envs import make_vec_env, seed_vec_env, step_transitions
from msrl_consistent.fastcall import FastCall

from .algorithm import Algorithm
from .cells import UpdateThenAct
from .run import RunContext

Action = Tuple[np.ndarray, np.ndarray]
"""(env action, normalized action in [-1, 1]) for a batch of observations."""


@dataclass
class OffPolicyConfig:
    """Fields shared by SAC and TD3 (the replay loop of OffPolicyAlgorithm)."""

    learning_rate: float = 3e-4
    """Adam learning rate of the critics and the actor (and SAC's temperature)."""
    buffer_size: int = 1000000
    """Replay buffer capacity in transitions."""
    memory_lean: bool = False
    """Replay buffer stores each observation once (next_obs read from the following row)."""
    save_replay_buffer: bool = False
    """Include the replay buffer in checkpoints (exact resume; large files)."""
    learning_starts: int = 100
    """Environment steps of uniform random actions (and no updates) before learning starts."""
    batch_size: int = 256
    """Minibatch size of each gradient step."""
    rank_batch: Literal["split", "full"] = "split"
    """Data parallel (``--workers N``): ``split`` samples ``batch_size / N`` per rank, so a gradient
    step averages one batch of ``batch_size`` as in one process; ``full`` samples ``batch_size`` per
    rank (the effective batch is N x batch_size)."""
    tau: float = 0.005
    """Polyak coefficient: target <- (1 - tau) * target + tau * online, at every target update."""
    gamma: float = 0.99
    """Discount factor."""
    train_freq: int = 1
    """Vector-env steps collected per training round (each is env.n_envs environment steps)."""
    gradient_steps: int = 1
    """Gradient steps per training round (-1: as many as environment steps collected in the round)."""
    log_interval: int = 1000
    """Environment steps between training log lines (stats averaged over the rounds in between)."""
    fuse_act: bool = True
    """Compute the next exploration action in the graph call of the round's last gradient step
    (bit-identical results, one graph call per round fewer; off with env.normalize_obs)."""

    checks: ClassVar[Dict[str, Check]] = {
        "learning_rate": POSITIVE, "buffer_size": POSITIVE, "learning_starts": NON_NEGATIVE, "batch_size": POSITIVE,
        "tau": (lambda v: 0 < v <= 1, "a number in (0, 1]"), "gamma": UNIT_INTERVAL,
        "train_freq": POSITIVE, "log_interval": POSITIVE,
        "gradient_steps": (lambda v: v > 0 or v == -1, "a positive number or -1")}


class BatchLayout(nn.Cell):
    """The packed float32 batch of one gradient step, ``[obs | action | reward | next_obs |
    terminated | noise]``, one row per transition: :meth:`pack` builds it on the host,
    ``construct`` (graph code) splits it into ``(obs, actions, rewards, next_obs, terminated,
    noise)``. One array per step is one host-to-device copy instead of six."""

    def __init__(self, obs_dim: int, act_dim: int, noise_dim: int):
        super().__init__()
        o, a = obs_dim, act_dim
        self.obs_dim, self.act_dim, self.noise_dim = o, a, noise_dim
        self.i_action, self.i_reward, self.i_next, self.i_term, self.i_noise = o, o + a, o + a + 1, 2 * o + a + 1, 2 * o + a + 2
        self.width = self.i_noise + noise_dim

    def pack(self, b: Dict[str, np.ndarray], noise: np.ndarray) -> np.ndarray:
        return np.concatenate([b["obs"], b["actions"], b["rewards"][:, None], b["next_obs"],
                               b["terminated"][:, None], noise], axis=1)

    def construct(self, batch):
        o, a = self.obs_dim, self.act_dim
        return (batch[:, :o], batch[:, self.i_action:self.i_action + a], batch[:, self.i_reward],
                batch[:, self.i_next:self.i_next + o], batch[:, self.i_term],
                batch[:, self.i_noise:self.i_noise + self.noise_dim])


class OffPolicyAlgorithm(Algorithm):
    """The loop shared by SAC and TD3 (as Stable-Baselines3's OffPolicyAlgorithm).

    Every round collects ``train_freq`` vector steps into the replay buffer, then runs
    ``gradient_steps`` updates (one graph call each). The rounds' stats are averaged and
    reported through ``RunContext.after_iteration`` every ``log_interval`` environment steps
    and whenever an evaluation or checkpoint step is reached. Before
    ``learning_starts`` environment steps the actions are uniform in the Box, drawn from the
    run's Generator, and no update runs. The buffer stores actions normalized to [-1, 1]
    (the critics' input, see sac.SACAgent) and the true next observation of every
    transition (SAME_STEP autoreset: ``real_next_obs`` from envs.step_transitions).

    Subclasses provide ``act_cell`` ((obs, noise) -> concat(env action, normalized action),
    one graph call per vector step), ``update_cells`` (name -> cell: packed batch -> stacked
    stats, one graph call per gradient step), ``update_kind(n)`` (which cell runs the n-th
    gradient step), ``noise_columns`` (standard-normal columns appended to each batch row)
    and ``summarize``; ``exploration_noise(n)`` may be overridden.

    With ``algo.fuse_act`` the round's last gradient step and the exploration action for the
    next observation run in one graph call (``UpdateThenAct``): the action is computed with
    the updated parameters and the noise the next ``explore`` would have drawn, in the same
    order from the Generator, so the results are bit-identical to the unfused loop (a test
    compares parameter hashes) with one graph call per round fewer. Not used with
    observation normalization (the statistics are synced after the update).

    Data parallel (msrun, ``--workers N``): every rank steps its own seeded envs into its own
    replay buffer and samples its own batch from its own Generator stream; each gradient is the
    ranks' mean inside the update graph (cells.RankMean), so the parameters, the targets, SAC's
    temperature and TD3's policy delay stay identical on every rank; a gradient step averages N
    rank batches (``algo.rank_batch``: ``batch_size / N`` each by default, so the effective batch
    is ``batch_size`` as in one process). ``num_timesteps``, ``learning_starts`` and the gradient
    steps count the steps of all ranks: a round runs ``gradient_steps x N`` updates, so N workers
    keep one process's gradient steps per environment step.

    Checkpoints include the replay buffer only with ``algo.save_replay_buffer`` (exact
    resume); by default it is left out: 1M HalfCheetah transitions are ~100-190 MB per
    checkpoint. A run resumed without its buffer collects ``learning_starts`` random steps
    again before updating.
    """

    buffer: Optional[ReplayBuffer] = None
    _act_fn: Optional[FastCall] = None
    _update_fns: Optional[Dict[Tuple[str, bool], FastCall]] = None
    act_cell: nn.Cell
    update_cells: Dict[str, nn.Cell]
    noise_columns: int = 0
    layout: BatchLayout
    """Set by ``build`` (``self.layout = self.batch_layout()``, after ``noise_columns``) and given to the update cells."""

    def __init__(self, cfg):
        if cfg.env.normalize_reward:
            raise ConfigError(f"key 'env.normalize_reward' applies to ppo; {cfg.algorithm} learns from the raw "
                              f"rewards (set it to false)")
        super().__init__(cfg)
        c = cfg.algo
        self.rank_batch_size = c.batch_size // self.dist.world if c.rank_batch == "split" else c.batch_size
        """Transitions this rank samples per gradient step."""

    @classmethod
    def check_workers(cls, cfg, workers: int) -> None:
        super().check_workers(cfg, workers)
        c = cfg.algo
        if workers > 1 and c.rank_batch == "split" and c.batch_size % workers:
            raise ConfigError(f"key 'algo.batch_size' has value {c.batch_size}, expected a multiple of the {workers} "
                              f"workers with algo.rank_batch 'split' (or set algo.rank_batch: full)")

    def batch_layout(self) -> BatchLayout:
        """The packed batch of this algorithm (its update cells unpack it with the same object's construct)."""
        return BatchLayout(self.spec.obs_dim, self.spec.n_actions, self.noise_columns)

    def update_kind(self, n_update: int) -> str:
        """Name of the update cell that runs the ``n_update``-th gradient step (1-based)."""
        return next(iter(self.update_cells))

    def summarize(self, stats: List[Tuple[str, np.ndarray]]) -> Dict[str, float]:
        """Training stats of one round from (update kind, stacked stats) per gradient step."""
        raise NotImplementedError

    def _fn(self, kind: str, fused: bool) -> FastCall:
        """FastCall of an update cell, or of the update cell followed by the acting cell."""
        if self._update_fns is None:
            self._update_fns = {}
        key = (kind, fused)
        if key not in self._update_fns:
            cell = self.update_cells[kind]
            self._update_fns[key] = FastCall(UpdateThenAct(cell, self.act_cell) if fused else cell)
        return self._update_fns[key]

    def packed_batch(self) -> np.ndarray:
        """One float32 training batch (BatchLayout): a replay sample, then ``noise_columns``
        standard-normal columns, both from the Generator."""
        bs = self.rank_batch_size
        b = self.sample_batch(bs)
        noise = self.rng.standard_normal((bs, self.noise_columns), dtype=np.float32)
        return self.layout.pack(b, noise)

    def train(self, gradient_steps: int, act_obs: Optional[np.ndarray] = None) -> Tuple[Dict[str, float], Optional[Action]]:
        """Run ``gradient_steps`` updates, one graph call each; returns the round's stats and,
        with ``act_obs``, the exploration action for ``act_obs`` computed in the last call with
        the updated parameters (else None)."""
        raw: List[Tuple[str, Tensor]] = []
        action = None
        for i in range(gradient_steps):
            self.n_updates += 1
            kind = self.update_kind(self.n_updates)
            packed = Tensor(self.packed_batch())
            if act_obs is not None and i == gradient_steps - 1:
                noise = self.exploration_noise(act_obs.shape[0])
                stats, out = self._fn(kind, True)(packed, Tensor(act_obs), Tensor(noise))
                action = self._split_action(out.asnumpy())
            else:
                stats = self._fn(kind, False)(packed)
            raw.append((kind, stats))
        res = self.summarize([(kind, t.asnumpy()) for kind, t in raw])
        res["n_updates"] = self.n_updates
        return res, action

    # -- acting ----------------------------------------------------------------------------
    def exploration_noise(self, n: int) -> np.ndarray:
        """Host-side noise for the acting graph (standard normal, one row per env)."""
        return self.rng.standard_normal((n, self.spec.n_actions)).astype(np.float32)

    def explore(self, obs: np.ndarray) -> Action:
        """(env action, normalized action) of the exploration policy: one graph call."""
        if self._act_fn is None:
            self._act_fn = FastCall(self.act_cell)
        out = self._act_fn(Tensor(obs), Tensor(self.exploration_noise(obs.shape[0]))).asnumpy()
        return self._split_action(out)

    def _split_action(self, out: np.ndarray) -> Action:
        """The acting cell's concat(env action, normalized action) as the pair."""
        k = self.spec.n_actions
        return out[:, :k], out[:, k:]

    def random_actions(self, n: int) -> Action:
        """Uniform actions in the Box (warm-up before learning_starts) and their normalized form."""
        low, high = self.spec.act_low, self.spec.act_high
        env_a = self.rng.uniform(low, high, size=(n, self.spec.n_actions)).astype(np.float32)
        norm = (2.0 * (env_a - low) / (high - low) - 1.0).astype(np.float32)
        return env_a, np.clip(norm, -1.0, 1.0)

    # -- replay buffer -----------------------------------------------------------------------
    def make_buffer(self, n_envs: int) -> ReplayBuffer:
        if self.buffer is None or self.buffer.n_envs != n_envs:
            c = self.cfg.algo
            self.buffer = ReplayBuffer(c.buffer_size, self.spec.obs_dim, self.spec.n_actions, n_envs,
                                       memory_lean=c.memory_lean)
        return self.buffer

    def sample_batch(self, batch_size: int) -> Dict[str, np.ndarray]:
        return self.buffer.sample(batch_size, self.rng)

    def extra_state(self) -> Dict[str, np.ndarray]:
        if not getattr(self.cfg.algo, "save_replay_buffer", False) or self.buffer is None:
            return {}
        return {f"replay/{k}": v for k, v in self.buffer.state().items()}

    def load_extra_state(self, tensors: Dict[str, np.ndarray]) -> None:
        d = {k[len("replay/"):]: v for k, v in tensors.items() if k.startswith("replay/")}
        if d:
            n_envs = int(d["pos_full"][3])
            self.make_buffer(n_envs).load(d)

    # -- the loop ------------------------------------------------------------------------------
    def learn_loop(self, run: RunContext) -> None:
        cfg, c = self.cfg, self.cfg.algo
        venv = make_vec_env(cfg.env)
        n_envs = venv.num_envs
        buf = self.make_buffer(n_envs)
        obs = seed_vec_env(venv, self.env_seed())
        ep_ret = np.zeros(n_envs, np.float64)
        ep_len = np.zeros(n_envs, np.int64)
        pending: List[Dict[str, float]] = []
        last_log = self.num_timesteps
        warmup_end = c.learning_starts
        if buf.size == 0 and self.num_timesteps > 0:
            warmup_end = self.num_timesteps + c.learning_starts  # resumed without its replay buffer
        fuse = bool(c.fuse_act) and self.obs_rms is None
        steps_per_vector_step = n_envs * self.dist.world  # num_timesteps counts every rank's steps
        phases = run.phases
        clock = time.perf_counter
        next_action = None  # exploration action for `obs` computed by the last (fused) update call
        try:
            while self.num_timesteps < cfg.total_timesteps:
                collected = 0
                for _ in range(c.train_freq):
                    t0 = clock()
                    if self.num_timesteps < warmup_end:
                        env_a, a = self.random_actions(n_envs)
                    elif next_action is not None:
                        (env_a, a), next_action = next_action, None
                    else:
                        env_a, a = self.explore(obs)
                    t1 = clock()
                    next_obs, rew, term, trunc, real_next = step_transitions(venv, env_a)
                    phases["env"] += clock() - t1
                    phases["acting"] += t1 - t0
                    buf.add(obs, real_next, a, rew, term, trunc)
                    self.num_timesteps += steps_per_vector_step
                    collected += n_envs  # this rank's steps: gradient_steps -1 runs as many updates
                    ep_ret += rew
                    ep_len += 1
                    for i in np.nonzero(term | trunc)[0]:
                        run.episode_done(float(ep_ret[i]), int(ep_len[i]))
                        ep_ret[i], ep_len[i] = 0.0, 0
                    if self.obs_rms is not None:  # every rank's observations, merged in rank order
                        self.obs_rms.update(self.dist.allgather(obs))
                    obs = next_obs
                    if self.num_timesteps >= cfg.total_timesteps:
                        break
                if self.num_timesteps > warmup_end and buf.size >= 1:  # SB3: train once past learning_starts
                    # every rank takes part in every gradient step: N ranks keep one process's ratio
                    steps = (c.gradient_steps if c.gradient_steps > 0 else collected) * self.dist.world
                    t0 = clock()
                    fused_obs = obs if fuse and self.num_timesteps < cfg.total_timesteps else None
                    stats, next_action = self.train(steps, act_obs=fused_obs)
                    pending.append(stats)
                    run.update_done(clock() - t0)
                # New statistics take effect after the update (frozen during a round and its update).
                self.sync_normalizer()
                self.iterations += 1
                # One log line (and the eval/checkpoint check) per log_interval steps, not per round:
                # RunContext.after_iteration costs ~1 ms (tensorboard + jsonl), as much as a small update.
                step = self.num_timesteps
                if (step - last_log >= c.log_interval or step >= cfg.total_timesteps
                        # a signal: checkpoint after this round. Data parallel: only at the log points
                        # every rank reaches together (each rank sees a forwarded signal at its own
                        # moment; a rank entering after_iteration's collective alone would meet the
                        # others' gradient all-reduce)
                        or (self.stop_requested is not None and not self.dist.enabled)
                        or (run.next_eval is not None and step >= run.next_eval)
                        or (run.next_ckpt is not None and step >= run.next_ckpt)):
                    run.after_iteration(_mean_stats(pending))
                    pending, last_log = [], step
        finally:
            venv.close()


def _mean_stats(rounds: List[Dict[str, float]]) -> Dict[str, float]:
    """Per-key mean over training rounds (counters such as n_updates: the last value)."""
    out: Dict[str, float] = {}
    for k in {k for r in rounds for k in r}:
        vals = [r[k] for r in rounds if k in r]
        out[k] = vals[-1] if k.startswith("n_") else float(np.mean(vals))
    out["train_rounds"] = len(rounds)
    return out
