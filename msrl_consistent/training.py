"""Training from Python: ``msrl_consistent.train(config, run_dir=...)``, what ``msrl train`` does
in one process.

    import msrl_consistent
    summary = msrl_consistent.train("ppo/CartPole-v1", run_dir="runs/cartpole", seed=0)

The run directory is the same as the command's (config.yaml, metrics.jsonl, checkpoints/,
summary.json), so ``msrl eval``/``export``/``plot`` and ``runtime.load_policy`` take it.
"""
from __future__ import annotations

import os
import time
from typing import Optional, Sequence, Union

from .config import Config, ConfigError, dump_config, load_config, to_dict


def default_run_dir(cfg: Config) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{cfg.algorithm}-{cfg.env.id}-seed{cfg.seed}-{stamp}")


def resolve(config: Union[str, Config], seed: Optional[int] = None, total_timesteps: Optional[int] = None,
            overrides: Sequence[str] = ()) -> Config:
    """A validated Config from a shipped config name, a YAML path or a Config, with ``seed``,
    ``total_timesteps`` and ``KEY=VALUE`` overrides (the syntax of ``--set``) applied."""
    sets = list(overrides)
    if seed is not None:
        sets.append(f"seed={seed}")
    if total_timesteps is not None:
        sets.append(f"total_timesteps={total_timesteps}")
    if isinstance(config, Config):
        return load_config(None, sets, data=to_dict(config)) if sets else config
    return load_config(config, sets)


def train(config: Union[str, Config], run_dir: Optional[str] = None, *, seed: Optional[int] = None,
          seeds: Optional[Sequence[int]] = None, sweep: Sequence[str] = (), total_timesteps: Optional[int] = None,
          overrides: Sequence[str] = (), progress: bool = False, jobs: int = 1) -> dict:
    """Train ``config`` (a shipped config name such as ``"ppo/CartPole-v1"``, a YAML path, or a
    :class:`~msrl_consistent.config.Config`) into ``run_dir`` (default
    ``runs/<algo>-<env>-seed<seed>-<timestamp>``; it must be empty or new) and return the run's
    summary (``summary.json``: steps, wall time, parameter sha256, ``final_eval``).

    ``overrides`` are ``KEY=VALUE`` strings as for ``msrl train --set`` (``"eval.freq=0"``).
    Raises ConfigError for an invalid config, TrainingInterrupted on SIGINT/SIGTERM (after a
    checkpoint), NonFiniteError on a non-finite loss or parameter.

    ``seeds`` (PPO, SAC, TD3) trains one member per seed in one process (a population,
    docs/populations.md), and with ``sweep`` (``["algo.learning_rate=1e-3,3e-4", ...]``, as
    ``--sweep``) one per seed and setting of the grid: ``run_dir`` then holds ``population.json``
    and one run directory per member (``seed<S>/``), and the population summary is returned.
    ``jobs`` > 1 trains the members in that many processes (groups of members, as ``--jobs``)."""
    from . import registry, runlock
    from .checkpoint import atomic_write_text

    cfg = resolve(config, seed, total_timesteps, overrides)
    if seeds is not None:
        from .populations import train_population
        return train_population(cfg, list(seeds), run_dir, progress, sweep=sweep, jobs=jobs)
    if sweep or jobs != 1:
        raise ConfigError("sweep and jobs need seeds (the seeds of every setting, e.g. seeds=[0])")
    run_dir = run_dir or default_run_dir(cfg)
    with runlock.new_run_dir(run_dir):
        atomic_write_text(os.path.join(run_dir, "config.yaml"), dump_config(cfg))
        return registry.get(cfg.algorithm)(cfg).learn(run_dir, progress=progress)
