"""What every algorithm shares: seeding, the agent and its policy cell, evaluation,
checkpoints, logging, and the on-policy loop (env stepping in Python, one graph call per
vector step, jitted updates). An algorithm supplies its networks' update (``train``) and,
for on-policy methods, a rollout cell.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
import os
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

import msrl_consistent
from msrl_consistent import checkpoint as ckpt
from msrl_consistent.buffers import ReplayBuffer, RolloutBuffer
from msrl_consistent.config import Config, to_dict
from msrl_consistent.determinism import configure_mindspore, params_sha256, seed_everything
from msrl_consistent.distributed import current as current_dist
from msrl_consistent.envs import env_spec, make_vec_env, run_episodes, seed_vec_env, step_transitions
from msrl_consistent.logging import RunLogger
from msrl_consistent.networks import build_agent, load_agent_parameters, named_parameters
from msrl_consistent.normalization import RunningMeanStd


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM during training: a checkpoint was written, exit 130 or 143."""

    def __init__(self, signum: int, checkpoint: str):
        super().__init__(f"interrupted by signal {signum}; checkpoint {checkpoint}")
        self.signum = signum
        self.checkpoint = checkpoint
        self.exit_code = 128 + signum


class NonFiniteError(RuntimeError):
    """A non-finite loss, gradient or parameter: training stops, the last good checkpoint stays."""


def schedule_value(initial: float, kind: str, progress_remaining: float) -> float:
    """constant, or linear decay to 0 as training progresses (RL-Zoo's ``lin_`` schedules)."""
    return initial * progress_remaining if kind == "linear" else initial


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
    """Compute the next exploration action in the graph call of the round's last gradient step (bit-identical results, one graph call per round fewer; off with env.normalize_obs)."""


POSITIVE = (lambda v: v > 0, "a positive number")
NON_NEGATIVE = (lambda v: v >= 0, "a number >= 0")
OffPolicyConfig._checks = {
    "learning_rate": POSITIVE, "buffer_size": POSITIVE, "learning_starts": NON_NEGATIVE, "batch_size": POSITIVE,
    "tau": (lambda v: 0 < v <= 1, "a number in (0, 1]"), "gamma": (lambda v: 0 <= v <= 1, "a number in [0, 1]"),
    "train_freq": POSITIVE, "log_interval": POSITIVE,
    "gradient_steps": (lambda v: v > 0 or v == -1, "a positive number or -1")}


class Algorithm:
    """Base of PPO / SAC / TD3. Subclasses set ``name`` and ``config_cls`` and implement
    ``build`` (loss and step cells, optimizers) and ``learn_loop``."""

    name: str = ""
    config_cls = None

    def __init__(self, cfg: Config):
        configure_mindspore(cfg.device)
        self.cfg = cfg
        self.dist = current_dist()
        self.rng = seed_everything(cfg.seed)
        self.stop_requested: Optional[int] = None
        self.spec = env_spec(cfg.env)
        self.agent = build_agent(cfg, self.spec, self.rng)  # identical initial weights on every rank
        if self.dist.rank > 0:  # data-parallel ranks draw their own noise (env seeds: env_seed())
            self.rng = np.random.default_rng([cfg.seed, self.dist.rank])
        self.policy = self.agent.policy_cell()
        self.obs_rms = RunningMeanStd((self.spec.obs_dim,)) if cfg.env.normalize_obs else None
        self.num_timesteps = 0
        self.iterations = 0
        self.n_updates = 0
        self.optimizers: Dict[str, nn.Optimizer] = {}
        self.build()

    # -- to implement ------------------------------------------------------------------
    def build(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def learn_loop(self, run: "RunContext") -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- acting ------------------------------------------------------------------------
    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        """The deterministic policy cell on a batch of observations (what export writes)."""
        return self.policy(Tensor(np.asarray(obs, np.float32))).asnumpy()

    def sync_normalizer(self) -> None:
        if self.obs_rms is not None:
            self.agent.normalizer.set_stats(self.obs_rms)

    def evaluate(self, episodes: int, seed: int) -> Tuple[List[float], List[int]]:
        res = run_episodes(self.cfg.env, self.act_deterministic, episodes, seed)
        return res["returns"], res["lengths"]

    # -- state ---------------------------------------------------------------------------
    def parameters(self) -> Dict[str, np.ndarray]:
        return {k: p.asnumpy() for k, p in named_parameters(self.agent).items()}

    def params_hash(self) -> str:
        return params_sha256(self.parameters())

    def state(self) -> Tuple[Dict[str, np.ndarray], Dict[str, object]]:
        tensors = {f"agent/{k}": v for k, v in self.parameters().items()}
        agent_ids = {id(p) for p in named_parameters(self.agent).values()}
        for oname, opt in self.optimizers.items():
            for k, p in opt.parameters_and_names():
                if id(p) not in agent_ids:
                    tensors[f"optim/{oname}/{k}"] = p.asnumpy()
        if self.obs_rms is not None:
            for k, v in self.obs_rms.state().items():
                tensors[f"host/obs_rms/{k}"] = v
        tensors["rng/mindspore"] = np.asarray(ms.get_rng_state().asnumpy() if hasattr(ms.get_rng_state(), "asnumpy") else ms.get_rng_state())
        tensors.update(self.extra_state())
        meta = {
            "algorithm": self.name,
            "counters": {"num_timesteps": self.num_timesteps, "iterations": self.iterations, "n_updates": self.n_updates},
            "numpy_rng": self.rng.bit_generator.state,
            "config": to_dict(self.cfg),
            "msrl_version": msrl_consistent.__version__,
            "mindspore_version": ms.__version__,
            "params_sha256": self.params_hash(),
        }
        return tensors, meta

    def extra_state(self) -> Dict[str, np.ndarray]:
        """Algorithm-specific tensors to checkpoint (e.g. a replay buffer)."""
        return {}

    def load_extra_state(self, tensors: Dict[str, np.ndarray]) -> None:
        pass

    def load_state(self, tensors: Dict[str, np.ndarray], meta: Dict[str, object], source: str = "",
                   training: bool = True) -> None:
        """Restore parameters (and, when ``training``, optimizer, counters and RNG states)."""
        load_agent_parameters(self.agent, tensors, source)
        if self.obs_rms is not None and "host/obs_rms/mean" in tensors:
            self.obs_rms.load({k: tensors[f"host/obs_rms/{k}"] for k in ("mean", "var", "count")})
        if not training:
            return
        for oname, opt in self.optimizers.items():
            for k, p in opt.parameters_and_names():
                key = f"optim/{oname}/{k}"
                if key in tensors:
                    p.set_data(Tensor(tensors[key]))
        c = meta.get("counters", {})
        self.num_timesteps = int(c.get("num_timesteps", 0))
        self.iterations = int(c.get("iterations", 0))
        self.n_updates = int(c.get("n_updates", 0))
        if "numpy_rng" in meta:
            self.rng.bit_generator.state = meta["numpy_rng"]
        if "rng/mindspore" in tensors:
            ms.set_rng_state(Tensor(tensors["rng/mindspore"]))
        self.load_extra_state(tensors)

    def save(self, path: str) -> None:
        tensors, meta = self.state()
        ckpt.save_checkpoint(path, tensors, meta)

    # -- training entry point ----------------------------------------------------------------
    def env_seed(self) -> int:
        """Seed of this rank's vector env from (seed, rank, steps done): a resumed run reseeds
        its envs deterministically."""
        return self.cfg.seed + 100_003 * self.dist.rank + self.num_timesteps

    def learn(self, run_dir: str, progress: bool = True) -> dict:
        """Train to ``cfg.total_timesteps``, writing logs and checkpoints into ``run_dir``.

        SIGINT/SIGTERM finish the current update, write a checkpoint atomically, record the
        interruption in metrics.jsonl and raise TrainingInterrupted (exit 130 / 143)."""
        import signal
        import threading

        run = RunContext(self, run_dir, progress)
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handlers[sig] = signal.getsignal(sig)
            self.install_signal_handlers()
        try:
            self.learn_loop(run)
            return run.finish()
        finally:
            from msrl_consistent import signals
            signals.on_sigint(None)
            for sig, h in handlers.items():
                signal.signal(sig, h)
            run.close()

    def _request_stop(self, signum, frame) -> None:
        self.stop_requested = signum

    def install_signal_handlers(self) -> None:
        """SIGINT/SIGTERM set ``stop_requested``.

        MindSpore re-installs its own SIGINT handler on every graph call, and it re-raises the
        signal as SIGTERM. The CLI receives SIGINT in a watcher thread instead (signals.py);
        without it (library use) the Python SIGINT handler is re-installed after every
        iteration, and a SIGINT arriving during graph calls ends as SIGTERM (exit 143)."""
        import signal
        import threading

        from msrl_consistent import signals
        if signals.watching():
            signals.on_sigint(lambda signum: self._request_stop(signum, None))
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, self._request_stop)

    @classmethod
    def resume(cls, run_dir: str) -> "Algorithm":
        """Rebuild a run from its config.yaml and newest intact checkpoint (parameters,
        optimizer, normalization, counters, RNG states)."""
        from msrl_consistent.config import load_config

        cfg = load_config(os.path.join(run_dir, "config.yaml"))
        path = ckpt.newest_intact(os.path.join(run_dir, "checkpoints"))
        if path is None:
            raise ckpt.CheckpointError(f"{run_dir} has no intact checkpoint to resume from")
        algo = cls(cfg)
        tensors, meta = ckpt.load_checkpoint(path)
        algo.load_state(tensors, meta, source=path, training=True)
        algo.sync_normalizer()
        algo.resumed_from = path
        return algo


class RunContext:
    """Logging, periodic evaluation and checkpointing around a learn loop."""

    def __init__(self, algo: Algorithm, run_dir: str, progress: bool):
        self.algo = algo
        self.cfg = algo.cfg
        self.run_dir = run_dir
        self.ckpt_dir = os.path.join(run_dir, "checkpoints")
        os.makedirs(self.ckpt_dir, exist_ok=True)
        self.main = algo.dist.is_main  # rank 0 alone writes logs, metrics and checkpoints
        self.logger = RunLogger(run_dir, self.cfg.total_timesteps, self.cfg.log.tensorboard, progress,
                                self.cfg.log.window, start_step=algo.num_timesteps, enabled=self.main)
        if getattr(algo, "resumed_from", None):
            self.logger.event(algo.num_timesteps, event="resumed", checkpoint=algo.resumed_from)
        if algo.dist.enabled:  # ranks/<rank>.json: running (with the pid), then the final results
            self.write_rank_status({"rank": algo.dist.rank, "world": algo.dist.world, "pid": os.getpid(),
                                    "status": "running"})
        self.t_start = time.perf_counter()
        self.next_eval = self._next_multiple(self.cfg.eval.freq)
        self.next_ckpt = self._next_multiple(self.cfg.checkpoint.freq)
        self.last_eval: Optional[dict] = None

    def _next_multiple(self, freq: int) -> Optional[int]:
        if freq <= 0:
            return None
        return (self.algo.num_timesteps // freq + 1) * freq

    def episode_done(self, ret: float, length: int) -> None:
        self.logger.episode(self.algo.num_timesteps, ret, length)

    def after_iteration(self, stats: Dict[str, float]) -> None:
        """Log training stats; evaluate and checkpoint when their step multiples are crossed."""
        algo = self.algo
        step = algo.num_timesteps
        stats = dict(stats)
        stats["steps_per_second"] = self.logger.steps_per_second(step)
        mr = self.logger.mean_return()
        if mr is not None:
            stats["recent_mean_return"] = mr
        self.check_finite(step, stats)
        self.logger.scalars(step, stats, "train")
        self.logger.progress(step)
        if self.next_eval is not None and step >= self.next_eval and step < self.cfg.total_timesteps:
            if self.main:
                self.evaluate()
            self.next_eval = self._next_multiple(self.cfg.eval.freq)
        if self.next_ckpt is not None and step >= self.next_ckpt and step < self.cfg.total_timesteps:
            self.save_periodic(step)
            self.next_ckpt = self._next_multiple(self.cfg.checkpoint.freq)
        if algo.stop_requested is not None:
            self.interrupt(algo.stop_requested)
        algo.install_signal_handlers()

    def save_periodic(self, step: int) -> str:
        path = os.path.join(self.ckpt_dir, f"step-{step:09d}.safetensors")
        if self.main:
            self.algo.save(path)
            ckpt.prune(self.ckpt_dir, self.cfg.checkpoint.keep)
        return path

    def interrupt(self, signum: int) -> None:
        step = self.algo.num_timesteps
        path = self.save_periodic(step)
        self.logger.event(step, event="interrupted", signal=int(signum), checkpoint=path)
        raise TrainingInterrupted(signum, path)

    def check_finite(self, step: int, stats: Dict[str, float]) -> None:
        """Stop on a non-finite loss, gradient norm or parameter, before anything is saved."""
        for k, v in stats.items():
            if ("loss" in k or "grad" in k) and isinstance(v, float) and not np.isfinite(v):
                self.logger.event(step, event="non_finite", quantity=k)
                raise NonFiniteError(f"non-finite {k} ({v}) at step {step}; training stopped, the last good "
                                     f"checkpoint in {self.ckpt_dir} is kept")
        for k, v in self.algo.parameters().items():
            if not np.all(np.isfinite(v)):
                self.logger.event(step, event="non_finite", quantity=f"parameter {k}")
                raise NonFiniteError(f"non-finite parameter {k} at step {step}; training stopped, the last good "
                                     f"checkpoint in {self.ckpt_dir} is kept")

    def evaluate(self) -> dict:
        step = self.algo.num_timesteps
        returns, lengths = self.algo.evaluate(self.cfg.eval.episodes, self.cfg.seed + self.cfg.eval.seed_offset)
        res = {"mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
               "mean_length": float(np.mean(lengths))}
        self.logger.scalars(step, res, "eval")
        self.last_eval = res
        return res

    def finish(self) -> dict:
        algo = self.algo
        wall = time.perf_counter() - self.t_start
        summary = {
            "algorithm": algo.name, "env": self.cfg.env.id, "seed": self.cfg.seed,
            "num_timesteps": algo.num_timesteps, "wall_time_s": round(wall, 3),
            "steps_per_second": round(self.logger.steps_per_second(algo.num_timesteps), 2),
            "params_sha256": algo.params_hash(),
        }
        if algo.dist.enabled:
            self.write_rank_status(dict(summary, rank=algo.dist.rank, world=algo.dist.world, pid=os.getpid(),
                                        status="finished"))
        if not self.main:
            return summary
        summary["final_eval"] = self.evaluate()
        algo.save(os.path.join(self.ckpt_dir, "final.safetensors"))
        self.logger.event(algo.num_timesteps, event="finished", **summary)
        ckpt.atomic_write_text(os.path.join(self.run_dir, "summary.json"), json.dumps(summary, indent=2) + "\n")
        return summary

    def write_rank_status(self, info: dict) -> None:
        os.makedirs(os.path.join(self.run_dir, "ranks"), exist_ok=True)
        ckpt.atomic_write_text(os.path.join(self.run_dir, "ranks", f"{self.algo.dist.rank}.json"),
                               json.dumps(info, indent=2) + "\n")

    def close(self) -> None:
        self.logger.close()


class OnPolicyAlgorithm(Algorithm):
    """Rollout collection shared by on-policy methods. Subclasses provide ``rollout_cell``
    (obs, noise) -> (env_action, action, log_prob, value), ``value_cell`` and ``train``."""

    n_steps: int = 0

    def sample_noise(self, n: int) -> np.ndarray:
        """Host-side noise for the rollout graph: Gumbel (discrete) or standard normal."""
        if self.spec.discrete:
            u = self.rng.random((n, self.spec.n_actions))
            return (-np.log(-np.log(np.clip(u, 1e-12, 1.0 - 1e-7)))).astype(np.float32)
        return self.rng.standard_normal((n, self.spec.n_actions)).astype(np.float32)

    def values_of(self, obs: np.ndarray) -> np.ndarray:
        return self.value_cell(Tensor(np.asarray(obs, np.float32))).asnumpy()

    def learn_loop(self, run: RunContext) -> None:
        cfg = self.cfg
        venv = make_vec_env(cfg.env)
        n_envs = venv.num_envs
        act_shape = () if self.spec.discrete else (self.spec.n_actions,)
        buf = RolloutBuffer(self.n_steps, n_envs, self.spec.obs_dim, act_shape, self.spec.discrete)
        steps_per_vector_step = n_envs * self.dist.world  # num_timesteps counts every rank's steps
        obs = seed_vec_env(venv, self.env_seed())
        ep_ret = np.zeros(n_envs, np.float64)
        ep_len = np.zeros(n_envs, np.int64)
        try:
            while self.num_timesteps < cfg.total_timesteps:
                buf.reset()
                for t in range(self.n_steps):
                    env_a, a, logp, v = self.rollout_cell(Tensor(obs), Tensor(self.sample_noise(n_envs)))
                    env_a, a = env_a.asnumpy(), a.asnumpy()
                    next_obs, rew, term, trunc, real_next = step_transitions(venv, env_a)
                    buf.add(obs, a, logp.asnumpy(), v.asnumpy(), rew, term, trunc)
                    if np.any(trunc):
                        idx = np.nonzero(trunc & ~term)[0]
                        if idx.size:
                            # the whole batch: one graph shape (a subset would compile a graph per size)
                            buf.set_final_values(t, idx, self.values_of(real_next)[idx])
                    self.num_timesteps += steps_per_vector_step
                    ep_ret += rew
                    ep_len += 1
                    for i in np.nonzero(term | trunc)[0]:
                        run.episode_done(float(ep_ret[i]), int(ep_len[i]))
                        ep_ret[i], ep_len[i] = 0.0, 0
                    obs = next_obs
                if self.obs_rms is not None:  # every rank's rollout, merged in rank order
                    self.obs_rms.update(self.dist.allgather(buf.obs))
                buf.compute(self.values_of(obs), self.gamma, self.gae_lambda)
                stats = self.train(buf)
                # New statistics take effect after the update: frozen during a rollout and its update.
                self.sync_normalizer()
                self.iterations += 1
                run.after_iteration(stats)
        finally:
            venv.close()


class FastCall:
    """Call a GRAPH_MODE cell without nn.Cell.__call__'s per-call bookkeeping.

    ``nn.Cell.__call__`` re-derives the argument key and walks the whole sub-cell tree
    (``compile_phase``) on every call: ~0.3-1.5 ms per call for the agents here, more than
    the acting graph's own run time. The first call with a given input signature (shapes,
    dtypes) goes through ``__call__`` (which compiles); later calls with that signature run
    the compiled graph directly. Only Tensor arguments are supported. If MindSpore's
    executor internals are not available, every call uses ``__call__``.
    """

    def __init__(self, cell: nn.Cell):
        self.cell = cell
        self._phases: Dict[tuple, str] = {}

    def __call__(self, *args):
        key = tuple((tuple(a.shape), a.dtype) for a in args)
        phase = self._phases.get(key)
        if phase is None or _GRAPH_EXECUTOR is None:
            out = self.cell(*args)
            if _GRAPH_EXECUTOR is not None and ms.get_context("mode") == ms.GRAPH_MODE:
                self._phases[key] = self.cell.current_phase
            return out
        return _convert_python_data(_GRAPH_EXECUTOR(args, phase))


try:  # MindSpore 2.x executor internals used by FastCall
    from mindspore.graph.api import _cell_graph_executor as _cge, _convert_python_data
    _GRAPH_EXECUTOR = _cge._graph_executor
except (ImportError, AttributeError):  # pragma: no cover - other MindSpore versions
    _GRAPH_EXECUTOR = None


class OffPolicyAlgorithm(Algorithm):
    """The loop shared by SAC and TD3 (as Stable-Baselines3's OffPolicyAlgorithm).

    Every round collects ``train_freq`` vector steps into the replay buffer, then runs
    ``gradient_steps`` updates (one graph call each). The rounds' stats are averaged and
    reported through ``RunContext.after_iteration`` every ``log_interval`` environment steps
    and whenever an evaluation or checkpoint step is reached. Before
    ``learning_starts`` environment steps the actions are uniform in the Box, drawn from the
    run's Generator, and no update runs. The buffer stores actions normalized to [-1, 1]
    (the critics' input, see networks.SACAgent) and the true next observation of every
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

    Checkpoints include the replay buffer only with ``algo.save_replay_buffer`` (exact
    resume); by default it is left out: 1M HalfCheetah transitions are ~100-190 MB per
    checkpoint. A run resumed without its buffer collects ``learning_starts`` random steps
    again before updating.
    """

    buffer: Optional[ReplayBuffer] = None
    _policy_fn: Optional[FastCall] = None
    _act_fn: Optional[FastCall] = None
    _update_fns: Optional[Dict[Tuple[str, bool], FastCall]] = None
    act_cell: nn.Cell
    update_cells: Dict[str, nn.Cell]
    noise_columns: int = 0

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
        """One float32 training batch [obs | action | reward | next_obs | terminated | noise]:
        the batch and then ``noise_columns`` standard-normal columns, both from the Generator."""
        bs = self.cfg.algo.batch_size
        b = self.sample_batch(bs)
        noise = self.rng.standard_normal((bs, self.noise_columns), dtype=np.float32)
        return np.concatenate([b["obs"], b["actions"], b["rewards"][:, None], b["next_obs"],
                               b["terminated"][:, None], noise], axis=1)

    def train(self, gradient_steps: int, act_obs: Optional[np.ndarray] = None):
        """Run ``gradient_steps`` updates, one graph call each; returns the round's stats.

        With ``act_obs``, the last call also computes the exploration action for ``act_obs``
        with the updated parameters and returns ``(stats, (env action, normalized action))``."""
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
        return res if act_obs is None else (res, action)

    # -- acting ----------------------------------------------------------------------------
    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        """The deterministic policy cell (the same cell and graph as Algorithm's), called via FastCall."""
        if self._policy_fn is None:
            self._policy_fn = FastCall(self.policy)
        return self._policy_fn(Tensor(np.asarray(obs, np.float32))).asnumpy()

    def exploration_noise(self, n: int) -> np.ndarray:
        """Host-side noise for the acting graph (standard normal, one row per env)."""
        return self.rng.standard_normal((n, self.spec.n_actions)).astype(np.float32)

    def explore(self, obs: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """(env action, normalized action) of the exploration policy: one graph call."""
        if self._act_fn is None:
            self._act_fn = FastCall(self.act_cell)
        out = self._act_fn(Tensor(obs), Tensor(self.exploration_noise(obs.shape[0]))).asnumpy()
        return self._split_action(out)

    def _split_action(self, out: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """The acting cell's concat(env action, normalized action) as the pair."""
        k = self.spec.n_actions
        return out[:, :k], out[:, k:]

    def random_actions(self, n: int) -> Tuple[np.ndarray, np.ndarray]:
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
        next_action = None  # exploration action for `obs` computed by the last (fused) update call
        try:
            while self.num_timesteps < cfg.total_timesteps:
                collected = 0
                for _ in range(c.train_freq):
                    if self.num_timesteps < warmup_end:
                        env_a, a = self.random_actions(n_envs)
                    elif next_action is not None:
                        (env_a, a), next_action = next_action, None
                    else:
                        env_a, a = self.explore(obs)
                    next_obs, rew, term, trunc, real_next = step_transitions(venv, env_a)
                    buf.add(obs, real_next, a, rew, term, trunc)
                    self.num_timesteps += n_envs
                    collected += n_envs
                    ep_ret += rew
                    ep_len += 1
                    for i in np.nonzero(term | trunc)[0]:
                        run.episode_done(float(ep_ret[i]), int(ep_len[i]))
                        ep_ret[i], ep_len[i] = 0.0, 0
                    if self.obs_rms is not None:
                        self.obs_rms.update(obs)
                    obs = next_obs
                    if self.num_timesteps >= cfg.total_timesteps:
                        break
                if self.num_timesteps > warmup_end and buf.size >= 1:  # SB3: train once past learning_starts
                    steps = c.gradient_steps if c.gradient_steps > 0 else collected
                    if fuse and self.num_timesteps < cfg.total_timesteps:
                        stats, next_action = self.train(steps, act_obs=obs)
                    else:
                        stats = self.train(steps)
                    pending.append(stats)
                # New statistics take effect after the update (frozen during a round and its update).
                self.sync_normalizer()
                self.iterations += 1
                # One log line (and the eval/checkpoint check) per log_interval steps, not per round:
                # RunContext.after_iteration costs ~1 ms (tensorboard + jsonl), as much as a small update.
                step = self.num_timesteps
                if (step - last_log >= c.log_interval or step >= cfg.total_timesteps
                        or self.stop_requested is not None  # a signal: checkpoint after this round
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


class UpdateThenAct(nn.Cell):
    """One graph: a gradient step (packed batch -> stats), then the exploration action for the
    next observation. MindSpore orders the acting cell's Parameter reads after the update's
    in-place writes (program order of side effects), so the action is the updated policy's."""

    def __init__(self, update: nn.Cell, act: nn.Cell):
        super().__init__()
        self.update = update
        self.act = act

    def construct(self, batch, obs, noise):
        stats = self.update(batch)
        return stats, self.act(obs, noise)


def polyak(targets, onlines, tau: float, ready):
    """Graph code: target <- (1 - tau) * target + tau * online for each Parameter pair, reading
    the online Parameters after ``ready`` (the output of their optimizer step)."""
    for t, o in zip(targets, onlines):
        ops.assign_add(t, tau * (ops.depend(o, ready) - t))  # bit-identical to Lerp, ~8x faster on CPU
    return ready


def twin_critic_params(agent, targets: bool = False) -> list:
    """The Parameters of ``q1`` then ``q2`` (or of their target copies), in a fixed order."""
    q1, q2 = (agent.q1_target, agent.q2_target) if targets else (agent.q1, agent.q2)
    return list(q1.get_parameters()) + list(q2.get_parameters())


class TwinCriticLoss(nn.Cell):
    """``scale * (MSE(Q1(s, a), y) + MSE(Q2(s, a), y))`` over the twin critics, and mean Q1 for
    logging. Stable-Baselines3 uses scale 0.5 in SAC and 1.0 in TD3."""

    def __init__(self, agent, scale: float):
        super().__init__()
        self.agent = agent
        self.scale = float(scale)

    def construct(self, x, actions, y):
        q1 = self.agent.q1(x, actions)
        q2 = self.agent.q2(x, actions)
        loss = self.scale * (((q1 - y) ** 2).mean() + ((q2 - y) ** 2).mean())
        return loss, ops.stop_gradient(q1.mean())
