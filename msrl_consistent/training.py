"""Training from Python: ``msrl_consistent.train(config, run_dir=...)``, what ``msrl train`` does
in one process.

    import msrl_consistent
    summary = msrl_consistent.train("ppo/CartPole-v1", run_dir="runs/cartpole", seed=0)
    summary = msrl_consistent.train("sac", env="myenv:GoToTarget-v0", total_timesteps=5000)

The run directory is the same as the command's (config.yaml, metrics.jsonl, checkpoints/,
summary.json), so ``msrl eval``/``export``/``plot`` and ``runtime.load_policy`` take it.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from .config import Config, ConfigError, dump_config, load_config, read_yaml, resolve_config, to_dict


def default_run_dir(cfg: Config) -> str:
    """``runs/<algo>-<env>-seed<seed>-<timestamp>``, the env id reduced to letters, digits, '.', '_'
    and '-' (``ALE/Breakout-v5`` -> ``ALE-Breakout-v5``, ``myenv:GoToTarget-v0`` -> ``myenv-GoToTarget-v0``)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    env = re.sub(r"[^A-Za-z0-9._-]+", "-", cfg.env.id).strip("-.") or "env"
    return os.path.join("runs", f"{cfg.algorithm}-{env}-seed{cfg.seed}-{stamp}")


@dataclass
class Origins:
    """Where a config's values came from, so that an error names the real source of a value."""

    base: str
    """The config file, or the algorithm whose defaults were taken."""
    sets: Sequence[str] = ()
    sets_label: str = "--set"
    env_label: str = ""
    """Where env.id came from when it was given apart from the config (--env, train(env=...))."""

    def of(self, key: str) -> str:
        if self.env_label and key == "env.id":
            return self.env_label
        for item in self.sets:
            k = item.split("=", 1)[0].strip()
            if key == k or key.startswith(k + ".") or key.startswith(k + "["):
                return self.sets_label
        return self.base


def resolve(config: Union[str, Config], seed: Optional[int] = None, total_timesteps: Optional[int] = None,
            overrides: Sequence[str] = (), env: Optional[str] = None, origin: str = "train() arguments") -> Config:
    """A validated Config from a shipped config name, a YAML path, an algorithm name (its
    defaults: ``"ppo"``) or a Config, with ``seed``, ``total_timesteps``, ``env`` (the env.id)
    and ``KEY=VALUE`` overrides (the syntax of ``--set``) applied; ``origin`` names them in errors."""
    return resolve_with_origins(config, seed, total_timesteps, overrides, env, origin)[0]


def resolve_with_origins(config, seed, total_timesteps, overrides, env, origin, sets_label: Optional[str] = None,
                         env_label: Optional[str] = None):
    """:func:`resolve`, and the :class:`Origins` of its values (``sets_label``: what the overrides
    are called, default ``origin``; ``env_label``: what ``env`` is called)."""
    from . import registry

    sets = list(overrides)
    if seed is not None:
        sets.append(f"seed={seed}")
    if total_timesteps is not None:
        sets.append(f"total_timesteps={total_timesteps}")
    if isinstance(config, Config):
        path, data = "<config>", to_dict(config)
    elif isinstance(config, str) and config in registry.names() and not os.path.exists(config):
        path, data = f"algorithm {config!r} with its defaults", {"algorithm": config}
    elif isinstance(config, str):
        path = resolve_config(config)
        data = read_yaml(path)
    else:
        hint = "; an environment goes in env= (train(\"ppo\", env=...))" if callable(config) or hasattr(config, "step") else ""
        raise ConfigError(f"config {config!r}: expected a shipped config name, a YAML path, an algorithm name "
                          f"({', '.join(registry.names())}) or a Config{hint}")
    if env is not None:
        if not isinstance(data.get("env", {}), dict):
            raise ConfigError(f"{path}: section 'env' must be a mapping")
        data.setdefault("env", {})["id"] = env
    where = path if env is None else f"{path} (env.id from {origin})"
    cfg = load_config(where, sets, data=data, origin=origin) if sets or env is not None or not isinstance(config, Config) \
        else config
    return cfg, Origins(path, sets, sets_label or origin, (env_label or origin) if env is not None else "")


def build_algorithm(cfg: Config, origins: Origins, run_dir: Optional[str] = None, created: bool = False,
                    init_from: Optional[str] = None):
    """The algorithm for ``cfg`` (its parameters from the run ``init_from``, when given:
    msrl_consistent.init_from); an environment error names the source of the value at fault.
    When it fails, nothing was trained: a run directory this run ``created`` (holding only its
    config.yaml and lock) is removed, so the same command works once the cause is fixed."""
    from . import registry, runlock
    from .envs.make import EnvError

    try:
        try:
            algo = registry.get(cfg.algorithm)(cfg)
        except EnvError as exc:
            raise ConfigError(f"{origins.of(exc.key)}: {exc}") from None
        algo.initialized_from = None
        if init_from:
            from .init_from import init_from as load_initial
            algo.initialized_from = load_initial(algo, init_from)
        return algo
    except BaseException:
        if run_dir and created and set(os.listdir(run_dir)) <= {"config.yaml", runlock.LOCK_FILE}:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def rounding_note(algo) -> str:
    """One sentence when the loop trains more steps than total_timesteps (whole rollouts), else ''."""
    trained = algo.trained_timesteps()
    if trained == algo.cfg.total_timesteps:
        return ""
    return (f"total_timesteps {algo.cfg.total_timesteps} is trained as {trained}: whole units of "
            f"{algo.timestep_unit()} steps")


def environment_argument(env: Any) -> str:
    """The env.id for ``train(env=...)``: a string as it is, a class or function importable by name
    as ``module:qualname``; any other object (a lambda, a closure, an Env instance) is provided to
    this process only, and the run says that a later eval or export needs ``env=`` again."""
    from .envs.make import IN_PROCESS, importable_name, in_process_id, provide

    if isinstance(env, str):
        return env
    name = importable_name(env)
    if name is not None:
        return name
    env_id = in_process_id(env)
    provide(env_id, env)
    print(f"msrl: the environment {env_id[len(IN_PROCESS):]} was given as a Python object that cannot be imported by "
          f"name; the run records it as {env_id!r}, and eval, export and verify of the run need it again: "
          f"load_policy(run_dir, env=...), export_run(..., env=...), verify_export(..., env=...)", file=sys.stderr)
    return env_id


def train(config: Union[str, Config], run_dir: Optional[str] = None, *, env: Any = None, seed: Optional[int] = None,
          seeds: Optional[Sequence[int]] = None, sweep: Sequence[str] = (), total_timesteps: Optional[int] = None,
          overrides: Sequence[str] = (), progress: bool = False, jobs: int = 1) -> dict:
    """Train ``config`` (a shipped config name such as ``"ppo/CartPole-v1"``, a YAML path, an
    algorithm name such as ``"ppo"`` for its defaults, or a :class:`~msrl_consistent.config.Config`)
    into ``run_dir`` (default ``runs/<algo>-<env>-seed<seed>-<timestamp>``; it must be empty or
    new) and return the run's summary (``summary.json``: steps, wall time, parameter sha256,
    ``final_eval``).

    ``env`` replaces the config's env.id: an id (``"CartPole-v1"``, ``"myenv:GoToTarget-v0"``,
    ``"myenv:make_env"``), or a Python object: a class or factory importable by name is recorded
    as ``module:qualname``; a lambda, a closure or a gymnasium.Env instance (each further copy a
    deep copy of it) trains in this process, and eval/export of the run take ``env=`` again.

    ``overrides`` are ``KEY=VALUE`` strings as for ``msrl train --set`` (``"eval.freq=0"``,
    ``"env.kwargs.size=8"``). Raises ConfigError for an invalid config or environment,
    TrainingInterrupted on SIGINT/SIGTERM (after a checkpoint), NonFiniteError on a non-finite
    loss or parameter.

    ``seeds`` (PPO, SAC, TD3) trains one member per seed in one process (a population,
    docs/populations.md), and with ``sweep`` (``["algo.learning_rate=1e-3,3e-4", ...]``, as
    ``--sweep``) one per seed and setting of the grid: ``run_dir`` then holds ``population.json``
    and one run directory per member (``seed<S>/``), and the population summary is returned.
    ``jobs`` > 1 trains the members in that many processes (groups of members, as ``--jobs``)."""
    from . import runlock
    from .checkpoint import atomic_write_text
    from .envs.make import IN_PROCESS

    env_id = None if env is None else environment_argument(env)
    cfg, origins = resolve_with_origins(config, seed, total_timesteps, overrides, env_id, "train() arguments")
    if seeds is not None:
        if jobs != 1 and cfg.env.id.startswith(IN_PROCESS):
            raise ConfigError(f"train(env=...): {cfg.env.id!r} exists in this process only; jobs={jobs} trains in other "
                              f"processes: pass an importable module:callable or an id, or jobs=1")
        from .populations import train_population
        return train_population(cfg, list(seeds), run_dir, progress, sweep=sweep, jobs=jobs)
    if sweep or jobs != 1:
        raise ConfigError("sweep and jobs need seeds (the seeds of every setting, e.g. seeds=[0])")
    run_dir = run_dir or default_run_dir(cfg)
    created = not os.path.isdir(run_dir)
    with runlock.new_run_dir(run_dir):
        atomic_write_text(os.path.join(run_dir, "config.yaml"), dump_config(cfg))
        algo = build_algorithm(cfg, origins, run_dir, created)
        note = rounding_note(algo)
        if note and progress:
            print(f"msrl: {note}", file=sys.stderr)
        return algo.learn(run_dir, progress=progress)
