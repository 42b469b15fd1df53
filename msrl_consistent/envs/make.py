"""One environment from its config: the id (registered, ``module:EnvId`` or ``module.path:callable``),
its constructor kwargs, the user's wrappers, then msrl's own (Atari, max-and-skip).

``env.id`` takes three forms, as gymnasium and RL Zoo spell them:

* a registered id (``CartPole-v1``, ``ALE/Breakout-v5``), made with ``gymnasium.make(id, **kwargs)``;
* ``module:EnvId``: ``module`` is imported (it registers ``EnvId``), then made as above;
* ``module.path:callable``: a class or factory returning a ``gymnasium.Env``, called with ``**kwargs``.

``env.packages`` are imported first. The current directory is importable, as under ``python -m``.
An environment passed to ``train(env=...)`` as a Python object that cannot be imported by name (a
lambda, a closure, an instance) is kept in this process only (:func:`provide`): its id starts
with ``<python>:``, and a later process needs ``env=`` again. Every failure is a ConfigError naming
the key and what was expected (:class:`EnvError`).
"""
from __future__ import annotations

import copy
import difflib
import importlib
import inspect
import os
import sys
from dataclasses import replace
from typing import Any, Callable, Dict, Optional

import gymnasium as gym
import numpy as np

from ..config import ConfigError, EnvConfig
from ..deploy import MaxAndSkip
from ..deploy.spaces import SpaceSpec
from . import atari, masked, sensors  # noqa: F401  (register CartPoleNoVel-v1, PendulumNoVel-v1, MultiSensorReach-v0)
from .spaces import space_spec

IN_PROCESS = "<python>:"
"""The prefix of an environment id that names a Python object given to ``train(env=...)``."""
_PROVIDED: Dict[str, Callable[..., gym.Env]] = {}


class EnvError(ConfigError):
    """The environment cannot be made or is not what msrl expects; ``key`` names the config key."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def importable_current_directory() -> None:
    """Make the current directory importable, as ``python -m`` does (appended, so it never shadows
    an installed package)."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)


def import_module(name: str, key: str, value: str):
    """Import ``name`` for config key ``key``; a missing module is an EnvError naming it."""
    importable_current_directory()
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or name
        if missing != name and not name.startswith(missing + "."):
            raise EnvError(key, f"key '{key}' has value {value!r}: importing module {name!r} needs module "
                                f"{missing!r}, which is not installed") from None
        raise EnvError(key, f"key '{key}' has value {value!r}: no module named {missing!r} (looked in the current "
                            f"directory {os.getcwd()} and the installed packages; a module of your own is found when "
                            f"msrl runs in the directory that holds it, or on PYTHONPATH)") from None
    except Exception as exc:  # the user's module failed while importing: its message, one line
        raise EnvError(key, f"key '{key}' has value {value!r}: importing module {name!r} raised "
                            f"{type(exc).__name__}: {exc}") from None


def split_entry(value: str, key: str):
    """``module:rest`` -> (module, rest); a value without ':' is (None, value)."""
    if ":" not in value:
        return None, value
    module, rest = value.split(":", 1)
    if not module or not rest or any(not part.isidentifier() for part in module.split(".")):
        raise EnvError(key, f"key '{key}' has value {value!r}, expected a registered id, module:EnvId or "
                            f"module.path:callable")
    return module, rest


def load_attr(module, qualname: str):
    """``module``'s object at the dotted ``qualname``, or None."""
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def provide(env_id: str, env: Any) -> None:
    """Make the Python object ``env`` (a factory, a class or an Env instance: each further copy is
    a deep copy of it) the environment named ``env_id`` in this process."""
    if isinstance(env, gym.Env):
        template = env
        _PROVIDED[env_id] = lambda **kwargs: copy.deepcopy(template)
    else:
        _PROVIDED[env_id] = env


def in_process_id(env: Any) -> str:
    """The id under which a Python object is provided (:func:`provide`)."""
    target = type(env) if isinstance(env, gym.Env) else env
    return IN_PROCESS + getattr(target, "__qualname__", type(target).__name__)


def importable_name(env: Any) -> Optional[str]:
    """``module:qualname`` when a class or function can be imported by that name in another
    process (not a lambda, a closure or an object of the running script), else None."""
    module, qualname = getattr(env, "__module__", None), getattr(env, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        return None
    try:
        found = load_attr(importlib.import_module(module), qualname)
    except Exception:
        return None
    return f"{module}:{qualname}" if found is env else None


def _check_kwargs(fn, kwargs: Dict[str, Any], key: str, who: str, skip_first: bool = False) -> None:
    """Refuse keyword arguments ``fn`` does not take, naming the key and its parameters."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return
    if skip_first and params:
        params = params[1:]
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for name in kwargs:
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise EnvError(f"{key}.{name}", f"key '{key}.{name}': {who} takes no argument {name!r}{hint}; its "
                                            f"parameters: {', '.join(names) or 'none'}")


def _unknown_id(env_id: str, key: str) -> EnvError:
    close = difflib.get_close_matches(env_id, list(gym.registry), n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return EnvError(key, f"key '{key}' has value {env_id!r}: no environment of that id is registered{hint} (an "
                         f"environment your own module registers: module:EnvId, or list the module in env.packages)")


def _registered_entry(env_id: str):
    """The constructor gymnasium calls for a registered id (for its parameter names)."""
    spec = gym.registry[env_id]
    entry = spec.entry_point
    if isinstance(entry, str):
        try:
            from gymnasium.envs.registration import load_env_creator
            entry = load_env_creator(entry)
        except Exception:
            return None, spec
    return entry, spec


def _mujoco(env_id: str) -> bool:
    spec = gym.registry.get(env_id)
    return spec is not None and isinstance(spec.entry_point, str) and "mujoco" in spec.entry_point


def _constructor(env_cfg: EnvConfig, make_kwargs: Dict[str, Any]) -> Callable[[], gym.Env]:  # noqa: C901  (one branch per form of env.id, each with its refusal)
    """The call that makes the bare environment (before any wrapper) from ``env.id`` and kwargs."""
    key = "env.id"
    for i, name in enumerate(env_cfg.packages):
        import_module(name, f"env.packages[{i}]", name)
    env_id = env_cfg.id
    if env_id.startswith(IN_PROCESS):
        factory = _PROVIDED.get(env_id)
        if factory is None:
            raise EnvError(key, f"key '{key}' is {env_id!r}: the run was trained on an environment passed as a Python "
                                f"object (train(env=...)), which is not rebuilt from the run directory; pass env= again "
                                f"(load_policy, export_run, verify_export), or train on an importable module:callable")
        return lambda: _call(factory, env_cfg.kwargs, key, env_id)
    module_name, rest = split_entry(env_id, key)
    if module_name is not None:
        module = import_module(module_name, key, env_id)
        obj = load_attr(module, rest)
        if obj is not None and callable(obj) and rest not in gym.registry:
            _check_kwargs(obj, env_cfg.kwargs, "env.kwargs", f"{env_id}")
            extra = {k: v for k, v in make_kwargs.items() if k == "render_mode"}
            return lambda: _call(obj, {**extra, **env_cfg.kwargs}, key, env_id, make_kwargs.get("max_episode_steps"))
        if rest not in gym.registry:
            close = difflib.get_close_matches(rest, list(gym.registry), n=3)
            hint = f"; did you mean {', '.join(repr(f'{module_name}:{c}') for c in close)}?" if close else ""
            raise EnvError(key, f"key '{key}' has value {env_id!r}: module {module_name!r} has no callable {rest!r} "
                                f"and registered no environment {rest!r}{hint}")
        env_id = rest
    elif env_id.startswith("ALE/") or "NoFrameskip" in env_id:
        from ..optional import ATARI_INSTALL, require
        gym.register_envs(require("ale_py", f"environment {env_id!r} (Atari)", ATARI_INSTALL))
    if env_id not in gym.registry:
        raise _unknown_id(env_id, key)
    entry, spec = _registered_entry(env_id)
    if entry is not None and env_cfg.kwargs:
        _check_kwargs(entry, {k: v for k, v in env_cfg.kwargs.items() if k not in spec.kwargs}, "env.kwargs",
                      f"{env_id}'s constructor ({spec.entry_point if isinstance(spec.entry_point, str) else entry.__qualname__})")
    return lambda: _make_registered(env_id, {**make_kwargs, **env_cfg.kwargs}, key, env_cfg.id)


def _make_registered(env_id: str, kwargs: Dict[str, Any], key: str, value: str) -> gym.Env:
    try:
        return gym.make(env_id, **kwargs)
    except gym.error.Error as exc:
        raise EnvError(key, f"key '{key}' has value {value!r}: {exc}") from None
    except ModuleNotFoundError as exc:
        hint = " (MuJoCo environments: pip install -e .[mujoco])" if _mujoco(env_id) else ""
        raise EnvError(key, f"environment {value!r} needs module {exc.name!r}, which is not installed{hint}") from None
    except Exception as exc:
        raise EnvError(key, f"environment {value!r}: its constructor raised {type(exc).__name__}: {exc}") from None


def _call(factory, kwargs: Dict[str, Any], key: str, value: str, max_episode_steps: Optional[int] = None) -> gym.Env:
    try:
        env = factory(**kwargs)
    except Exception as exc:
        raise EnvError(key, f"environment {value!r}: calling it raised {type(exc).__name__}: {exc}") from None
    if not isinstance(env, gym.Env):
        raise EnvError(key, f"key '{key}' has value {value!r}: it returned {type(env).__name__}, expected a gymnasium.Env")
    if max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, max_episode_steps)
    return env


def wrapper_class(entry: str, key: str):
    """The callable a ``env.wrappers[i].entry`` names (``module:Class``)."""
    module_name, rest = split_entry(entry, key)
    if module_name is None:
        raise EnvError(key, f"key '{key}' has value {entry!r}, expected module:Class (e.g. "
                            f"gymnasium.wrappers:TimeAwareObservation)")
    obj = load_attr(import_module(module_name, key, entry), rest)
    if obj is None or not callable(obj):
        raise EnvError(key, f"key '{key}' has value {entry!r}: module {module_name!r} has no callable {rest!r}")
    return obj


def apply_wrappers(env: gym.Env, env_cfg: EnvConfig) -> gym.Env:
    """The user's wrappers, in order, each ``Class(env, **kwargs)``."""
    for i, w in enumerate(env_cfg.wrappers):
        key = f"env.wrappers[{i}]"
        cls = wrapper_class(w.entry, f"{key}.entry")
        _check_kwargs(cls, w.kwargs, f"{key}.kwargs", f"wrapper {w.entry}", skip_first=True)
        try:
            wrapped = cls(env, **w.kwargs)
        except Exception as exc:
            raise EnvError(f"{key}.entry", f"wrapper {w.entry!r} ({key}) raised {type(exc).__name__}: {exc}") from None
        if not isinstance(wrapped, gym.Env):
            raise EnvError(f"{key}.entry", f"wrapper {w.entry!r} ({key}) returned {type(wrapped).__name__}, expected a "
                                           f"gymnasium.Env")
        env = wrapped
    return env


def make_env(env_cfg: EnvConfig, render_mode: Optional[str] = None, training: bool = False):
    """One gymnasium env: the bare environment, the user's wrappers, then msrl's own (Atari, the
    action repeat). ``training``: a training env (``env.atari``'s life-loss episodes and reward
    clipping apply to those only)."""
    kwargs: Dict[str, Any] = {}
    if env_cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = env_cfg.max_episode_steps
    if render_mode:
        kwargs["render_mode"] = render_mode
    skip = int(getattr(env_cfg, "max_and_skip", 1) or 1)
    if skip > 1 and env_cfg.id.startswith("ALE/"):
        kwargs["frameskip"] = 1  # the ALE renders every frame; MaxAndSkipEnv repeats and pools
    env = apply_wrappers(_constructor(env_cfg, kwargs)(), env_cfg)
    try:
        return atari.wrap(env, env_cfg.atari, env_cfg.id, lambda e: MaxAndSkipEnv(e, skip) if skip > 1 else e,
                          training)
    except atari.Unsupported as exc:
        raise ConfigError(str(exc)) from None


class MaxAndSkipEnv(gym.Wrapper):
    """``env.max_and_skip`` k > 1: every action repeated k times, rewards summed, the observation
    the pixel-wise max of the last two frames (deploy.MaxAndSkip, the code a deployment loop
    calls too)."""

    def __init__(self, env, skip: int):
        super().__init__(env)
        self.max_and_skip = MaxAndSkip(skip)

    def step(self, action):
        return self.max_and_skip.repeat(self.env.step, action)


def env_spec(env_cfg: EnvConfig, check: bool = True) -> SpaceSpec:
    """The SpaceSpec of the config's environment (its frame stack and action repeat applied), after
    the start-up check of the environment (:func:`~msrl_consistent.envs.check.check_env`)."""
    from .check import check_env

    if env_cfg.pipeline == "overlap" and env_cfg.n_envs < 2:
        raise ConfigError(f"key 'env.pipeline' is 'overlap', but env.n_envs is {env_cfg.n_envs}: the overlap steps "
                          f"one half of the envs while the policy acts on the other, so it needs n_envs >= 2")
    env = make_env(env_cfg)
    try:
        spec = check_env(env, env_cfg.id) if check else space_spec(env.observation_space, env.action_space, env_cfg.id)
    finally:
        env.close()
    k = int(getattr(env_cfg, "frame_stack", 1) or 1)
    if k > 1:
        if spec.obs_kind not in ("Box", "Image"):
            raise ConfigError(f"key 'env.frame_stack' is {k}, but the observation space is {spec.obs_kind}; frame "
                              f"stacking applies to Box and image observations")
        spec = replace(spec, frame_stack=k, obs_low=np.tile(spec.obs_low, k), obs_high=np.tile(spec.obs_high, k))
    skip = int(getattr(env_cfg, "max_and_skip", 1) or 1)
    if skip > 1:
        if spec.obs_kind != "Image":
            raise ConfigError(f"key 'env.max_and_skip' is {skip}, but the observation space is {spec.obs_kind}; "
                              f"max-and-skip (the max of the last two frames) applies to image observations")
        spec = replace(spec, max_and_skip=skip)
    return spec
