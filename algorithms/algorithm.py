"""The life cycle every algorithm shares: seeding, the agent and its policy cell, evaluation,
state (parameters, optimizers, counters, RNGs) for checkpoints and resume, and ``learn``,
which runs the algorithm's ``learn_loop`` inside a :class:`RunContext` and the signal guard.

An algorithm subclass sets ``name``, ``config_cls`` and ``agent_cls`` and implements ``build``
(its loss and step cells, optimizers) and ``learn_loop``; ``@register`` makes it known to
``msrl_consistent.registry``. The on-policy and off-policy loops are in on_policy.py and
off_policy.py.
"""
from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

import msrl_consistent
from msrl_consistent import checkpoint as ckpt
from msrl_consistent import runlock
from msrl_consistent.checkpoint import load_agent_parameters
from msrl_consistent.config import Config, ConfigError, load_config, to_dict
from msrl_consistent.deploy.recurrent import RecurrentState
from msrl_consistent.determinism import configure_mindspore, params_sha256, seed_everything
from msrl_consistent.distributed import current as current_dist
from msrl_consistent.envs import env_spec
from msrl_consistent.envs.recipe import recipe
from msrl_consistent.episodes import run_episodes
from msrl_consistent.fastcall import FastCall
from msrl_consistent.networks.agents import named_parameters
from msrl_consistent.normalization import RunningMeanStd
from msrl_consistent.registry import register
from msrl_consistent.run_context import NonFiniteError, RunContext, TrainingInterrupted
from msrl_consistent.signals import StopOnSignals

__all__ = ["Algorithm", "NonFiniteError", "RunContext", "TrainingInterrupted", "register", "schedule_value"]


def schedule_value(initial: float, kind: str, progress_remaining: float) -> float:
    """constant, or linear decay to 0 as training progresses (RL-Zoo's ``lin_`` schedules)."""
    return initial * progress_remaining if kind == "linear" else initial


class Algorithm:
    """Base of PPO / SAC / TD3."""

    name: str = ""
    config_cls: type
    agent_cls: type
    data_parallel: bool = False
    """True when the algorithm's update averages gradients over msrun ranks (``msrl train --workers N``)."""
    resumed_from: Optional[str] = None

    def __init__(self, cfg: Config):
        configure_mindspore(cfg.device)
        self.cfg = cfg
        self.dist = current_dist()
        self.check_workers(cfg, self.dist.world)
        self.rng = seed_everything(cfg.seed)
        self.stop_requested: Optional[int] = None
        self.signals: Optional[StopOnSignals] = None
        self.spec = env_spec(cfg.env)
        self.env_recipe = recipe(cfg.env)
        """What the run records of its environment (summary.json, checkpoints, the export's manifest)."""
        self.agent = self.agent_cls(cfg, self.spec, self.rng)  # identical initial weights on every rank
        if self.dist.rank > 0:  # data-parallel ranks draw their own noise (env seeds: env_seed())
            self.rng = np.random.default_rng([cfg.seed, self.dist.rank])
        self.policy = self.agent.policy_cell()
        self._policy_fn = FastCall(self.policy)
        self.obs_rms = RunningMeanStd((self.spec.obs_dim,)) if cfg.env.normalize_obs else None
        self.num_timesteps = 0
        self.iterations = 0
        self.n_updates = 0
        self.optimizers: Dict[str, nn.Optimizer] = {}
        self.build()

    @classmethod
    def check_workers(cls, cfg: Config, workers: int) -> None:
        """Refuse a data-parallel run of ``workers`` ranks this algorithm or config cannot train."""
        if workers > 1 and not cls.data_parallel:
            raise ConfigError(f"--workers {workers}: algorithm {cls.name!r} does not train data-parallel "
                              f"(ppo, sac and td3 do)")

    # -- to implement ------------------------------------------------------------------
    def build(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def learn_loop(self, run: RunContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def timestep_unit(self) -> int:
        """The steps the loop adds at once (a vector step of every rank's envs)."""
        return self.cfg.env.n_envs * self.dist.world

    def trained_timesteps(self) -> int:
        """total_timesteps rounded up to whole units: the step count the run ends at."""
        unit = self.timestep_unit()
        return -(-self.cfg.total_timesteps // unit) * unit

    # -- acting ------------------------------------------------------------------------
    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        """The deterministic policy cell on a batch of observations (what export writes)."""
        return self._policy_fn(Tensor(np.asarray(obs, np.float32))).asnumpy()

    def sync_normalizer(self) -> None:
        if self.obs_rms is not None:
            self.agent.normalizer.set_stats(self.obs_rms)

    def evaluate(self, episodes: int, seed: int, max_steps: Optional[int] = None,
                 stop=None) -> Tuple[List[float], List[int]]:
        """``episodes`` seeded episodes of the policy cell, side by side: one graph call per step
        (a recurrent cell with each env's state carried and reset where its episode ended);
        ``max_steps`` and ``stop`` as episodes.run_episodes."""
        act, reset = self.act_deterministic, None
        if self.agent.state_size:
            state = RecurrentState(self.agent.state_size)
            act, reset = (lambda obs: state.step(self._policy_step, np.asarray(obs, np.float32))), state.reset
        res = run_episodes(self.cfg.env, act, episodes, seed, side_by_side=True, frame_stack=self.spec.frame_stack,
                           reset=reset, max_steps=max_steps, stop=stop)
        return res["returns"], res["lengths"]

    def _policy_step(self, x, h, c, episode_start):
        """The recurrent policy cell on NumPy inputs: -> (action, h', c')."""
        return tuple(o.asnumpy() for o in self._policy_fn(Tensor(x), Tensor(h), Tensor(c), Tensor(episode_start)))

    # -- state ---------------------------------------------------------------------------
    def parameters(self) -> Dict[str, np.ndarray]:
        return {k: p.asnumpy() for k, p in named_parameters(self.agent).items()}

    def params_hash(self) -> str:
        return params_sha256(self.parameters())

    before_state: Optional[Callable[[], None]] = None
    """Called first by ``state``: a population (population.py) copies the member's optimizer state
    out of its stacked optimizer, so a checkpoint holds the member's current state."""

    def state(self) -> Tuple[Dict[str, np.ndarray], Dict[str, object]]:
        if self.before_state is not None:
            self.before_state()
        tensors = {f"agent/{k}": v for k, v in self.parameters().items()}
        agent_ids = {id(p) for p in named_parameters(self.agent).values()}
        for oname, opt in self.optimizers.items():
            for k, p in opt.parameters_and_names():
                if id(p) not in agent_ids:
                    tensors[f"optim/{oname}/{k}"] = p.asnumpy()
        if self.obs_rms is not None:
            for k, v in self.obs_rms.state().items():
                tensors[f"host/obs_rms/{k}"] = v
        tensors.update(self._rank_tensors())
        meta = {
            "algorithm": self.name,
            "counters": self._counters(),
            "numpy_rng": self.rng.bit_generator.state,
            "world": self.dist.world,
            "config": to_dict(self.cfg),
            "env_recipe": self.env_recipe,
            "msrl_version": msrl_consistent.__version__,
            "mindspore_version": ms.__version__,
            "params_sha256": self.params_hash(),
        }
        return tensors, meta

    def _counters(self) -> Dict[str, int]:
        return {"num_timesteps": self.num_timesteps, "iterations": self.iterations, "n_updates": self.n_updates}

    def _rank_tensors(self) -> Dict[str, np.ndarray]:
        """What differs between data-parallel ranks: the MindSpore RNG state and extra_state."""
        rng_state = ms.get_rng_state()
        out = {"rng/mindspore": np.asarray(rng_state.asnumpy() if hasattr(rng_state, "asnumpy") else rng_state)}
        out.update(self.extra_state())
        return out

    def save_rank_state(self, path: str) -> None:
        """Data parallel, ranks > 0: this rank's own state (its RNG streams and extra_state, e.g.
        its replay buffer), the part of a checkpoint that rank 0's file does not hold."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        ckpt.save_checkpoint(path, self._rank_tensors(), {
            "rank": self.dist.rank, "world": self.dist.world, "counters": self._counters(),
            "numpy_rng": self.rng.bit_generator.state})

    def load_rank_state(self, checkpoint: str, meta: Dict[str, object]) -> None:
        """Data parallel, ranks > 0, after ``load_state`` of rank 0's ``checkpoint``: this rank's
        own RNG streams and extra_state from its file when the checkpoint was written by as many
        ranks; otherwise (another worker count) a fresh stream from (seed, rank, steps done) and
        no replay buffer: the resume works but is not exact."""
        if not self.dist.enabled or self.dist.rank == 0:
            return
        path = ckpt.rank_path(checkpoint, self.dist.rank)
        if int(meta.get("world", 1)) != self.dist.world:
            self.rng = np.random.default_rng([self.cfg.seed, self.dist.rank, self.num_timesteps])
            return
        tensors, rmeta = ckpt.load_checkpoint(path)
        if rmeta.get("counters") != self._counters():
            raise ckpt.CheckpointError(f"{path} belongs to step {rmeta.get('counters')}, not to {checkpoint}")
        self.rng.bit_generator.state = rmeta["numpy_rng"]
        ms.set_rng_state(Tensor(tensors["rng/mindspore"]))
        self.load_extra_state(tensors)

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
                    arr = np.asarray(tensors[key])
                    if arr.shape != tuple(p.shape) and arr.size == int(np.prod(p.shape)):
                        arr = arr.reshape(p.shape)  # scalars (learning rate, beta powers) are stored with shape (1,)
                    p.set_data(Tensor(arr))
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

    def request_stop(self, signum: int) -> None:
        """Finish the current iteration, checkpoint and raise TrainingInterrupted."""
        self.stop_requested = signum

    def learn(self, run_dir: str, progress: bool = True) -> dict:
        """Train to ``cfg.total_timesteps``, writing logs and checkpoints into ``run_dir``.

        SIGINT/SIGTERM finish the current update, write a checkpoint atomically, record the
        interruption in metrics.jsonl and raise TrainingInterrupted (exit 130 / 143)."""
        os.makedirs(run_dir, exist_ok=True)
        with runlock.hold(run_dir):  # one training process per run directory
            # the handlers first: a data-parallel launcher signals a worker once its pid is in ranks/
            with StopOnSignals(self.request_stop) as self.signals:
                run = RunContext(self, run_dir, progress)
                try:
                    self.learn_loop(run)
                    return run.finish()
                finally:
                    self.signals = None
                    run.close()

    @classmethod
    def resume(cls, run_dir: str) -> "Algorithm":
        """Rebuild a run from its config.yaml and newest intact checkpoint (parameters,
        optimizer, normalization, counters, RNG states)."""
        cfg = load_config(os.path.join(run_dir, "config.yaml"))
        path = ckpt.newest_intact(os.path.join(run_dir, "checkpoints"))
        if path is None:
            raise ckpt.CheckpointError(f"{run_dir} has no intact checkpoint to resume from")
        algo = cls(cfg)
        tensors, meta = ckpt.load_checkpoint(path)
        if algo.dist.rank > 0:  # rank 0's own RNG streams and buffer stay in its file
            tensors = {k: v for k, v in tensors.items() if k.startswith(("agent/", "optim/", "host/"))}
        algo.load_state(tensors, meta, source=path, training=True)
        algo.load_rank_state(path, meta)
        algo.sync_normalizer()
        algo.resumed_from = path
        return algo
