"""The start-up check of an environment (as SB3's ``check_env``): every run, ``msrl check-env`` and
the evaluation paths make the environment and call :func:`check_env` before anything trains.

It refuses, with one ConfigError naming what was found and what was expected: spaces msrl does not
support (:func:`~msrl_consistent.envs.spaces.space_spec`), a ``reset`` that does not return
``(obs, info)``, a ``step`` that does not return ``(obs, reward, terminated, truncated, info)``,
observations whose shape or kind is not the observation space's, and NaN or infinite
observations or rewards over a few random steps. The steps run on a probe environment of their
own (the action space sampled with a fixed seed), so a training run's environments and random
streams are untouched.
"""
from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np

from ..config import ConfigError
from ..deploy.spaces import SpaceSpec
from .spaces import space_spec

RANDOM_STEPS = 32
"""Random steps the check takes (resetting where an episode ends)."""


class EnvCheckError(ConfigError):
    """The environment does not behave as a gymnasium.Env msrl can train on."""


def _describe(x: Any) -> str:
    arr = np.asarray(x) if not isinstance(x, dict) else None
    if arr is None:
        return f"a dict with keys {sorted(x)}"
    return f"{type(x).__name__} of dtype {arr.dtype}, shape {arr.shape}"


def check_observation(obs: Any, space: gym.Space, where: str, key: str = "") -> None:
    """``obs`` has the shape and kind of ``space`` and is finite (float dtypes of other widths are
    cast by msrl, so float64 for a float32 Box passes)."""
    what = f"{where} returned an observation{f' (key {key!r})' if key else ''}"
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, dict) or set(obs) != set(space.spaces):
            raise EnvCheckError(f"{what} that is {_describe(obs)}; expected a dict with keys {sorted(space.spaces)}")
        for k, sub in space.spaces.items():
            check_observation(obs[k], sub, where, k)
        return
    if isinstance(space, gym.spaces.Discrete):
        a = np.asarray(obs)
        if a.shape != () or not np.issubdtype(a.dtype, np.integer) or not space.contains(int(a)):
            raise EnvCheckError(f"{what} {obs!r}; expected an integer in [{space.start}, {space.start + space.n - 1}] "
                                f"(the Discrete observation space)")
        return
    a = np.asarray(obs)
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        raise EnvCheckError(f"{what} that is {_describe(obs)}; expected numbers of the space's {space}")
    if a.shape != space.shape:
        raise EnvCheckError(f"{what} of shape {a.shape}; expected the observation space's shape {space.shape} ({space})")
    if space.dtype == np.uint8 and a.dtype != np.uint8:
        raise EnvCheckError(f"{what} of dtype {a.dtype}; the observation space is an image of dtype uint8 ({space})")
    if not np.all(np.isfinite(a)):
        raise EnvCheckError(f"{what} holding NaN or infinite values; expected finite observations")


def check_env(env: gym.Env, env_id: str = "", steps: int = RANDOM_STEPS) -> SpaceSpec:
    """Check ``env`` (consumed: reset and stepped) and return its SpaceSpec; EnvCheckError names
    the first problem found."""
    spec = space_spec(env.observation_space, env.action_space, env_id)
    who = f"environment {env_id!r}: " if env_id else ""
    try:
        _run(env, steps)
    except EnvCheckError as exc:
        raise EnvCheckError(f"{who}{exc}") from None
    except ConfigError:
        raise
    except Exception as exc:  # the environment's own code failed: its message, one line
        raise EnvCheckError(f"{who}{type(exc).__name__} while checking it with random actions: {exc}") from None
    return spec


def _run(env: gym.Env, steps: int) -> None:
    out = env.reset(seed=0)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        raise EnvCheckError(f"reset() returned {type(out).__name__}{f' of {len(out)}' if isinstance(out, tuple) else ''}; "
                            f"expected a tuple (observation, info dict)")
    check_observation(out[0], env.observation_space, "reset()")
    actions = copy.deepcopy(env.action_space)  # the env's own space keeps its generator
    actions.seed(0)
    for _ in range(steps):
        out = env.step(actions.sample())
        if not (isinstance(out, tuple) and len(out) == 5):
            n = f" of {len(out)}" if isinstance(out, tuple) else ""
            raise EnvCheckError(f"step() returned {type(out).__name__}{n}; expected a tuple (observation, reward, "
                                f"terminated, truncated, info) as gymnasium >= 0.26 defines it")
        obs, reward, terminated, truncated, info = out
        check_observation(obs, env.observation_space, "step()")
        if not isinstance(reward, (int, float, np.integer, np.floating)) or isinstance(reward, bool) \
                or not np.isfinite(reward):
            raise EnvCheckError(f"step() returned the reward {reward!r}; expected a finite number")
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(flag, (bool, np.bool_)):
                raise EnvCheckError(f"step() returned {name}={flag!r}; expected a bool")
        if not isinstance(info, dict):
            raise EnvCheckError(f"step() returned info of type {type(info).__name__}; expected a dict")
        if terminated or truncated:
            check_observation(env.reset()[0], env.observation_space, "reset()")



def _describe_space(space: gym.Space) -> str:
    if isinstance(space, gym.spaces.Dict):
        return f"Dict({', '.join(f'{k}: {_describe_space(v)}' for k, v in sorted(space.spaces.items()))})"
    if isinstance(space, gym.spaces.Box):
        return f"Box({', '.join(map(str, space.shape))}; {space.dtype})"
    return str(space)


def cmd_check_env(args) -> int:
    """``msrl check-env ID [--set KEY=VALUE ...]``: make the environment as training would and check it."""
    from ..config import ConfigError, load_config
    from ..training import Origins
    from .make import EnvError, make_env

    overrides = [f"env.id={args.env_id}"] if args.env_id else []
    base = args.config or None
    cfg = load_config(base, overrides + list(args.set or []), data=None if base else {},
                      origin=", ".join(o for o, v in (("the command line", args.env_id), ("--set", args.set)) if v))
    origins = Origins(base or "the defaults", list(args.set or []), "--set", "the command line" if args.env_id else "")
    try:
        env = make_env(cfg.env)
    except EnvError as exc:
        raise ConfigError(f"{origins.of(exc.key)}: {exc}") from None
    try:
        spec = check_env(env, cfg.env.id, args.steps)
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    values = f"{spec.obs_dim} value{'s' if spec.obs_dim != 1 else ''}"
    print(f"msrl check-env: {cfg.env.id}: ok; observations {_describe_space(obs_space)} ({values} per row of the "
          f"policy cell), actions {_describe_space(act_space)}; reset and {args.steps} random steps gave well-formed, "
          f"finite observations and rewards")
    return 0


def add_parser(sub) -> None:
    c = sub.add_parser("check-env", help="check that an environment can be trained on (spaces, reset, step, finite values)")
    c.add_argument("env_id", nargs="?", help="a registered id, module:EnvId or module.path:callable (default: the "
                                             "config's env.id)")
    c.add_argument("--config", help="take the env section of this config (a YAML path or shipped config name)")
    c.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key, e.g. env.kwargs.size=8")
    c.add_argument("--steps", type=int, default=RANDOM_STEPS, help=f"random steps to take (default {RANDOM_STEPS})")
    c.set_defaults(func=cmd_check_env)
