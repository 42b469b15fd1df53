"""What every off-policy algorithm (DQN, SAC, TD3) shares, as Stable-Baselines3's
OffPolicyAlgorithm: the config section, the packed batch of one gradient step, the replay buffer,
the hooks an algorithm fills and the continuous-action conventions SAC and TD3 opt into. The
loop itself (one run's or a population's) is off_policy_loop.Rounds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Dict, List, Literal, Optional, Tuple

import numpy as np
from mindspore import Parameter, nn

from msrl_consistent.buffers import ReplayBuffer
from msrl_consistent.config import NON_NEGATIVE, POSITIVE, UNIT_INTERVAL, Check, ConfigError
from msrl_consistent.optim import Adam
from msrl_consistent.run_context import RunContext

from .algorithm import Algorithm
from .off_policy_loop import Rounds, mean_stats

Action = Tuple[np.ndarray, np.ndarray]
"""(env action, stored action) for a batch of observations: SAC's and TD3's stored action is the
normalized one in [-1, 1], DQN's the action index as a float32 column."""


@dataclass
class OffPolicyConfig:
    """Fields shared by the off-policy algorithms (the replay loop of OffPolicyAlgorithm)."""

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
    noise)``, for one run's (rows, width) or a population's (members, rows, width). One array
    per step is one host-to-device copy instead of six."""

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
        return (batch[..., :o], batch[..., self.i_action:self.i_action + a], batch[..., self.i_reward],
                batch[..., self.i_next:self.i_next + o], batch[..., self.i_term],
                batch[..., self.i_noise:self.i_noise + self.noise_dim])


class OffPolicyAlgorithm(Algorithm):
    """An off-policy algorithm (as Stable-Baselines3's OffPolicyAlgorithm), whatever its action
    space: the loop (off_policy_loop.Rounds) collects ``train_freq`` vector steps into the replay
    buffer per round, then runs ``gradient_steps`` updates, one graph call each; before
    ``learning_starts`` environment steps the actions are ``random_actions`` and no update runs.
    The buffer stores the true next observation of every transition (SAME_STEP autoreset).

    An algorithm sets, in ``build`` before calling this class's: ``act_cell`` ((obs, noise) ->
    concat(env action, stored action), one graph call per vector step) and ``noise_columns``
    (standard-normal columns appended to each batch row); it provides ``optimizer_groups``
    (name -> Parameters of one Adam), ``update_steps`` (update kind -> cell: packed batch ->
    stats), ``update_kind(n)`` (which kind runs the n-th gradient step), ``summarize``, and the
    acting hooks ``exploration_noise``, ``random_actions``, ``split_action`` (ContinuousActions
    has SAC's and TD3's). ``member_networks`` names the agent's networks a population stacks
    (networks.stacked.MembersView): ``optimizer_groups`` and ``update_steps`` then build the
    population's step from the same code, with the members' coefficients and the write-back of
    the ``acting_group``'s Parameters into the members' own, which act.

    With ``algo.fuse_act`` the round's last gradient step and the exploration action for the
    next observation run in one graph call (cells.UpdateThenAct): the action is computed with
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
    resume); by default it is left out: a million transitions make every checkpoint large
    (docs/benchmarks.md gives HalfCheetah's size). A run resumed without its buffer collects ``learning_starts`` random steps
    again before updating.
    """

    buffer: Optional[ReplayBuffer] = None
    act_cell: nn.Cell
    update_cells: Dict[str, nn.Cell]
    noise_columns: int = 0
    member_networks: Tuple[str, ...] = ()
    """The agent's networks (attribute names) a population stacks."""
    acting_group = "actor"
    """The optimizer group whose Parameters the acting cell reads (a population writes them back
    into the members' own after every gradient step)."""
    layout: BatchLayout
    _rounds: Optional[Rounds] = None

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

    def build(self) -> None:
        """One Adam per optimizer group, the batch layout and the update cells (the algorithm's
        ``build`` has set ``act_cell`` and ``noise_columns``)."""
        lr = self.cfg.algo.learning_rate
        self.optimizers = {name: Adam(params, learning_rate=lr) for name, params in self.optimizer_groups(self.agent).items()}
        self.layout = self.batch_layout()
        self.update_cells = self.update_steps(self.agent, self.optimizers)

    # -- what an algorithm provides ------------------------------------------------------------------
    def optimizer_groups(self, agent) -> Dict[str, List[Parameter]]:
        """Name -> the Parameters one Adam trains, of this agent or of a population's MembersView."""
        raise NotImplementedError

    def update_steps(self, agent, optimizers: Dict[str, nn.Cell], coefs: Optional[dict] = None,
                     write_back: Optional[nn.Cell] = None) -> Dict[str, nn.Cell]:
        """Update kind -> gradient-step cell for this agent (or a population's MembersView, with
        the members' ``coefs`` (cells.per_member) and the ``write_back`` of their acting Parameters)."""
        raise NotImplementedError

    def batch_layout(self) -> BatchLayout:
        """The packed batch of this algorithm (its update cells unpack it with the same object's construct)."""
        return BatchLayout(self.spec.obs_dim, self.action_width, self.noise_columns)

    @property
    def action_width(self) -> int:
        """Columns of a stored action in the replay buffer."""
        return self.spec.n_actions

    def update_kind(self, n_update: int) -> str:
        """Name of the update cell that runs the ``n_update``-th gradient step (1-based)."""
        return next(iter(self.update_cells))

    def summarize(self, stats: List[Tuple[str, np.ndarray]]) -> Dict[str, float]:
        """Training stats of one round from (update kind, stacked stats) per gradient step."""
        raise NotImplementedError

    def exploration_noise(self, n: int) -> np.ndarray:
        """Host-side input of the acting graph besides the observations, one row per env."""
        raise NotImplementedError

    def random_actions(self, n: int) -> Action:
        """The warm-up actions before learning_starts (from the run's Generator)."""
        raise NotImplementedError

    def split_action(self, out: np.ndarray) -> Action:
        """The acting cell's output rows as (env action, stored action)."""
        raise NotImplementedError

    def start_rounds(self) -> None:
        """Called when the loop starts (or resumes)."""

    def due_cells(self) -> List[str]:
        """Argument-free update cells due before this round's gradient steps (DQN: its target updates)."""
        return []

    # -- one run's loop --------------------------------------------------------------------------------
    @property
    def rounds(self) -> Rounds:
        if self._rounds is None:
            self._rounds = Rounds([self], self, stacked=False, owner=self)
        return self._rounds

    def train(self, gradient_steps: int, act_obs: Optional[np.ndarray] = None) -> Tuple[Dict[str, float], Optional[Action]]:
        """Run ``gradient_steps`` updates, one graph call each; returns the round's stats and,
        with ``act_obs``, the exploration action for ``act_obs`` computed in the last call with
        the updated parameters (else None)."""
        stats, actions = self.rounds.train(gradient_steps, None if act_obs is None else act_obs[None])
        return stats[0], None if actions is None else actions[0]

    def explore(self, obs: np.ndarray) -> Action:
        """(env action, stored action) of the exploration policy: one graph call."""
        return self.rounds.explore(obs[None])[0]

    def learn_loop(self, run: RunContext) -> None:
        self.rounds.loop([run])

    def log_point(self, runs: List[RunContext], pending: List[List[Dict[str, float]]]) -> None:
        """The loop's log point: the stats of the rounds since the last one, then the run's logs,
        evaluation and checkpoint (RunContext.after_iteration)."""
        runs[0].after_iteration(mean_stats(pending[0]))

    def packed_batch(self) -> np.ndarray:
        """One float32 training batch (BatchLayout): a replay sample, then ``noise_columns``
        standard-normal columns, both from the Generator."""
        bs = self.rank_batch_size
        b = self.sample_batch(bs)
        noise = self.rng.standard_normal((bs, self.noise_columns), dtype=np.float32)
        return self.layout.pack(b, noise)

    # -- replay buffer -----------------------------------------------------------------------
    def make_buffer(self, n_envs: int) -> ReplayBuffer:
        if self.buffer is None or self.buffer.n_envs != n_envs:
            c = self.cfg.algo
            self.buffer = ReplayBuffer(c.buffer_size, self.spec.obs_dim, self.action_width, n_envs,
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


class ContinuousActions:
    """The acting conventions of SAC and TD3 (Box actions): the buffer stores actions normalized
    to [-1, 1] (the critics' input, see sac.SACAgent), the acting cell returns concat(env action,
    normalized action), the host draws standard-normal exploration noise and uniform warm-up
    actions in the Box."""

    rng: np.random.Generator
    spec: object

    def exploration_noise(self, n: int) -> np.ndarray:
        """Standard normal, one row per env."""
        return self.rng.standard_normal((n, self.spec.n_actions)).astype(np.float32)

    def split_action(self, out: np.ndarray) -> Action:
        k = self.spec.n_actions
        return out[:, :k], out[:, k:]

    def random_actions(self, n: int) -> Action:
        """Uniform actions in the Box (warm-up before learning_starts) and their normalized form."""
        low, high = self.spec.act_low, self.spec.act_high
        env_a = self.rng.uniform(low, high, size=(n, self.spec.n_actions)).astype(np.float32)
        norm = (2.0 * (env_a - low) / (high - low) - 1.0).astype(np.float32)
        return env_a, np.clip(norm, -1.0, 1.0)
