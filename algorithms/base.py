"""What every algorithm shares: seeding, the agent and its policy cell, evaluation,
checkpoints, logging, and the on-policy loop (env stepping in Python, one graph call per
vector step, jitted updates). An algorithm supplies its networks' update (``train``) and,
for on-policy methods, a rollout cell.
"""
from __future__ import annotations

import json
import os
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn

import msrl_consistent
from msrl_consistent import checkpoint as ckpt
from msrl_consistent.buffers import RolloutBuffer
from msrl_consistent.config import Config, dump_config, to_dict
from msrl_consistent.determinism import configure_mindspore, params_sha256, seed_everything
from msrl_consistent.envs import env_spec, make_vec_env, run_episodes, seed_vec_env, step_transitions
from msrl_consistent.logging import RunLogger
from msrl_consistent.networks import build_agent, named_parameters
from msrl_consistent.normalization import RunningMeanStd


def schedule_value(initial: float, kind: str, progress_remaining: float) -> float:
    """constant, or linear decay to 0 as training progresses (RL-Zoo's ``lin_`` schedules)."""
    return initial * progress_remaining if kind == "linear" else initial


class Algorithm:
    """Base of PPO / SAC / TD3. Subclasses set ``name`` and ``config_cls`` and implement
    ``build`` (loss and step cells, optimizers) and ``learn_loop``."""

    name: str = ""
    config_cls = None

    def __init__(self, cfg: Config):
        configure_mindspore(cfg.device)
        self.cfg = cfg
        self.rng = seed_everything(cfg.seed)
        self.spec = env_spec(cfg.env)
        self.agent = build_agent(cfg, self.spec, self.rng)
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
        params = named_parameters(self.agent)
        missing = [k for k in params if f"agent/{k}" not in tensors]
        if missing:
            raise ckpt.CheckpointError(f"{source}: checkpoint lacks parameters {missing[:5]} "
                                       f"(was it written by another algorithm or network config?)")
        for k, p in params.items():
            arr = tensors[f"agent/{k}"]
            if tuple(arr.shape) != tuple(p.shape):
                raise ckpt.CheckpointError(f"{source}: parameter {k} has shape {arr.shape}, the network expects {tuple(p.shape)}")
            p.set_data(Tensor(arr))
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
    def learn(self, run_dir: str, progress: bool = True) -> dict:
        """Train to ``cfg.total_timesteps``, writing logs and checkpoints into ``run_dir``."""
        run = RunContext(self, run_dir, progress)
        try:
            self.learn_loop(run)
            return run.finish()
        finally:
            run.close()


class RunContext:
    """Logging, periodic evaluation and checkpointing around a learn loop."""

    def __init__(self, algo: Algorithm, run_dir: str, progress: bool):
        self.algo = algo
        self.cfg = algo.cfg
        self.run_dir = run_dir
        self.ckpt_dir = os.path.join(run_dir, "checkpoints")
        os.makedirs(self.ckpt_dir, exist_ok=True)
        self.logger = RunLogger(run_dir, self.cfg.total_timesteps, self.cfg.log.tensorboard, progress,
                                self.cfg.log.window, start_step=algo.num_timesteps)
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
        self.logger.scalars(step, stats, "train")
        self.logger.progress(step)
        if self.next_eval is not None and step >= self.next_eval and step < self.cfg.total_timesteps:
            self.evaluate()
            self.next_eval = self._next_multiple(self.cfg.eval.freq)
        if self.next_ckpt is not None and step >= self.next_ckpt and step < self.cfg.total_timesteps:
            algo.save(os.path.join(self.ckpt_dir, f"step-{step:09d}.safetensors"))
            ckpt.prune(self.ckpt_dir, self.cfg.checkpoint.keep)
            self.next_ckpt = self._next_multiple(self.cfg.checkpoint.freq)

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
        final_eval = self.evaluate()
        algo.save(os.path.join(self.ckpt_dir, "final.safetensors"))
        wall = time.perf_counter() - self.t_start
        summary = {
            "algorithm": algo.name, "env": self.cfg.env.id, "seed": self.cfg.seed,
            "num_timesteps": algo.num_timesteps, "wall_time_s": round(wall, 3),
            "steps_per_second": round(self.logger.steps_per_second(algo.num_timesteps), 2),
            "params_sha256": algo.params_hash(), "final_eval": final_eval,
        }
        self.logger.event(algo.num_timesteps, event="finished", **summary)
        ckpt.atomic_write_text(os.path.join(self.run_dir, "summary.json"), json.dumps(summary, indent=2) + "\n")
        return summary

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
        # A resumed run reseeds its envs from (seed, steps done) so episodes continue deterministically.
        obs = seed_vec_env(venv, cfg.seed + self.num_timesteps)
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
                            buf.set_final_values(t, idx, self.values_of(real_next[idx]))
                    self.num_timesteps += n_envs
                    ep_ret += rew
                    ep_len += 1
                    for i in np.nonzero(term | trunc)[0]:
                        run.episode_done(float(ep_ret[i]), int(ep_len[i]))
                        ep_ret[i], ep_len[i] = 0.0, 0
                    if self.obs_rms is not None:
                        self.obs_rms.update(obs)
                    obs = next_obs
                buf.compute(self.values_of(obs), self.gamma, self.gae_lambda)
                stats = self.train(buf)
                # New statistics take effect after the update: frozen during a rollout and its update.
                self.sync_normalizer()
                self.iterations += 1
                run.after_iteration(stats)
        finally:
            venv.close()
