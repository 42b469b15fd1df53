"""gymnasium vector envs: construction, space checks, seeding, autoreset handling.

The vector envs run in gymnasium's SAME_STEP autoreset mode: the step that ends an
episode returns the first observation of the next one and puts the true final
observation in ``info["final_obs"]``. :func:`step_transitions` turns that into
transitions that never span two episodes: ``next_obs`` is the true final observation for
every ended sub-env, so truncated episodes bootstrap from it and terminated ones do not
(their ``terminated`` flag zeroes the bootstrap).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence, Union

import gymnasium as gym
import numpy as np

from . import (
    atari,
    masked_envs,  # noqa: F401  (registers CartPoleNoVel-v1, PendulumNoVel-v1)
    sensor_envs,  # noqa: F401  (registers MultiSensorReach-v0 and its one-sensor views)
)
from .config import ConfigError, EnvConfig
from .deploy import MaxAndSkip
from .deploy.fields import PIXEL_VALUES, image_key, row_order
from .deploy.spaces import SpaceSpec


def space_spec(observation_space, action_space, env_id: str = "") -> SpaceSpec:  # noqa: C901  (one branch per gymnasium space kind, each with its refusal)
    """Check the spaces are supported (Box, Discrete, uint8 image or Dict-of-those observations;
    Box, Discrete, MultiDiscrete or MultiBinary actions)."""
    from gymnasium import spaces

    who = f"environment {env_id!r}: " if env_id else ""
    obs_kind, obs_n, image_layout = "Box", 0, ""
    if isinstance(observation_space, spaces.Discrete):
        if int(observation_space.start) != 0:
            raise ConfigError(f"{who}unsupported Discrete observation space with start={observation_space.start}; "
                              f"expected start 0")
        obs_kind, obs_n = "Discrete", int(observation_space.n)
        obs_shape = (1,)
        obs_low, obs_high = np.zeros(1, np.float32), np.full(1, obs_n - 1, np.float32)
    elif isinstance(observation_space, spaces.Box) and observation_space.dtype == np.uint8:
        shape = tuple(observation_space.shape)
        if len(shape) == 3 and shape[-1] in (1, 3, 4):
            layout = "HWC"
        elif len(shape) == 3 and shape[0] in (1, 3, 4):
            layout = "CHW"
        elif len(shape) == 2:
            layout = "HWC"
        else:
            raise ConfigError(f"{who}unsupported uint8 observation shape {shape}; an image is (height, width), "
                              f"(height, width, channels) or (channels, height, width) with 1, 3 or 4 channels")
        if np.any(observation_space.low != 0) or np.any(observation_space.high != 255):
            raise ConfigError(f"{who}uint8 image observations must span 0..255 (the cell divides by 255); got "
                              f"low {observation_space.low.min()}..high {observation_space.high.max()}")
        obs_kind, obs_shape = "Image", shape
        obs_low = np.zeros(int(np.prod(shape)), np.float32)
        obs_high = np.full(int(np.prod(shape)), 255.0, np.float32)
        image_layout = layout
    elif isinstance(observation_space, spaces.Box):
        if not np.issubdtype(observation_space.dtype, np.floating):
            raise ConfigError(f"{who}unsupported observation dtype {observation_space.dtype}; expected a float Box "
                              f"(or a uint8 image)")
        obs_shape = tuple(observation_space.shape)
        obs_low = np.asarray(observation_space.low, np.float32).ravel()
        obs_high = np.asarray(observation_space.high, np.float32).ravel()
    elif isinstance(observation_space, spaces.Dict):
        obs_kind = "Dict"
        parts, bounds = [], {}
        for key in sorted(observation_space.spaces):
            sub = observation_space.spaces[key]
            try:
                s = space_spec(sub, spaces.Discrete(2))
            except ConfigError as exc:
                raise ConfigError(f"{who}Dict observation key {key!r}: {exc}") from None
            if s.obs_kind == "Dict":
                raise ConfigError(f"{who}Dict observation key {key!r} is a Dict; nested Dicts are not supported")
            if s.obs_kind == "Image" and not image_key(str(key)):
                raise ConfigError(f"{who}Dict observation key {key!r} holds an image, and an image key names its "
                                  f"graph input (obs_<key>): use letters, digits and '_' (at most 64)")
            n = PIXEL_VALUES if s.obs_kind == "Image" else s.obs_n
            parts.append((str(key), s.obs_kind, n, tuple(s.obs_shape) if s.obs_kind != "Discrete" else (1,)))
            bounds[str(key)] = (s.obs_low, s.obs_high)
        if not parts:
            raise ConfigError(f"{who}the Dict observation space has no keys")
        parts = row_order(parts)  # image keys first: the exported graph's float32 row is the packed row's tail
        obs_low = np.concatenate([bounds[p[0]][0] for p in parts])
        obs_high = np.concatenate([bounds[p[0]][1] for p in parts])
        obs_shape = (int(obs_low.size),)
    else:
        raise ConfigError(f"{who}unsupported observation space {type(observation_space).__name__} "
                          f"({observation_space}); msrl-consistent supports Box, Discrete and Dict observations")
    ob = dict(obs_kind=obs_kind, obs_n=obs_n, image_layout=image_layout)
    if obs_kind == "Dict":
        ob["obs_parts"] = tuple(parts)
    if isinstance(action_space, spaces.Discrete):
        if int(action_space.start) != 0:
            raise ConfigError(f"{who}unsupported Discrete action space with start={action_space.start}; expected start 0")
        return SpaceSpec(obs_shape, obs_low, obs_high, True, int(action_space.n), **ob)
    if isinstance(action_space, spaces.MultiDiscrete):
        nvec = np.asarray(action_space.nvec)
        if nvec.ndim != 1 or np.any(np.asarray(action_space.start) != 0):
            raise ConfigError(f"{who}unsupported MultiDiscrete action space {action_space}; expected a 1-D nvec "
                              f"with start 0")
        return SpaceSpec(obs_shape, obs_low, obs_high, True, int(nvec.size), act_kind="MultiDiscrete",
                         nvec=tuple(int(v) for v in nvec), **ob)
    if isinstance(action_space, spaces.MultiBinary):
        if np.ndim(action_space.n) != 0:
            raise ConfigError(f"{who}unsupported MultiBinary action shape {action_space.shape}; expected MultiBinary(n)")
        n = int(action_space.n)
        return SpaceSpec(obs_shape, obs_low, obs_high, True, n, act_kind="MultiBinary", nvec=(2,) * n, **ob)
    if isinstance(action_space, spaces.Box):
        if len(action_space.shape) != 1:
            raise ConfigError(f"{who}unsupported Box action shape {action_space.shape}; expected a 1-D Box")
        low = np.asarray(action_space.low, np.float32)
        high = np.asarray(action_space.high, np.float32)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ConfigError(f"{who}Box action space must have finite bounds, got low={low} high={high}")
        return SpaceSpec(obs_shape, obs_low, obs_high, False, int(action_space.shape[0]), low, high, **ob)
    raise ConfigError(f"{who}unsupported action space {type(action_space).__name__} ({action_space}); "
                      f"msrl-consistent supports Box, Discrete, MultiDiscrete and MultiBinary actions")


def flat_obs(obs, n: int) -> np.ndarray:
    """A batch of ``n`` observations as the policy cell's rows, float32 (n, obs_dim): a Box
    flattened, a Discrete index as one value, a Dict (of arrays with a leading batch axis, or one
    observation when n == 1) concatenated in SpaceSpec.obs_parts's order (image keys first, then
    the others, each group in sorted key order)."""
    if isinstance(obs, dict):  # image (uint8) keys first, as SpaceSpec.obs_parts (fields.row_order)
        keys = sorted(obs, key=lambda k: (np.asarray(obs[k]).dtype != np.uint8, k))
        return np.concatenate([np.asarray(obs[k], np.float32).reshape(n, -1) for k in keys], axis=1)
    arr = np.asarray(obs)
    if arr.dtype == np.uint8:  # an image: the raw frame is the cell's input
        return arr.reshape(n, -1)
    return np.asarray(arr, dtype=np.float32).reshape(n, -1)


def make_env(env_cfg: EnvConfig, render_mode: Optional[str] = None, training: bool = False):
    """One gymnasium env; unknown ids become a ConfigError naming the id. ``training``: a training
    env (``env.atari``'s life-loss episodes and reward clipping apply to those only)."""
    if env_cfg.id.startswith("ALE/") or "NoFrameskip" in env_cfg.id:
        from .optional import ATARI_INSTALL, require
        ale_py = require("ale_py", f"environment {env_cfg.id!r} (Atari)", ATARI_INSTALL)
        gym.register_envs(ale_py)
    kwargs = {}
    if env_cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = env_cfg.max_episode_steps
    if render_mode:
        kwargs["render_mode"] = render_mode
    skip = int(getattr(env_cfg, "max_and_skip", 1) or 1)
    if skip > 1 and env_cfg.id.startswith("ALE/"):
        kwargs["frameskip"] = 1  # the ALE renders every frame; MaxAndSkipEnv repeats and pools
    try:
        env = gym.make(env_cfg.id, **kwargs)
        return atari.wrap(env, env_cfg.atari, env_cfg.id, lambda e: MaxAndSkipEnv(e, skip) if skip > 1 else e,
                          training)
    except gym.error.Error as exc:
        raise ConfigError(f"key 'env.id' has value {env_cfg.id!r}: {exc}") from None
    except atari.Unsupported as exc:
        raise ConfigError(str(exc)) from None
    except ImportError as exc:
        raise ConfigError(f"environment {env_cfg.id!r} needs a package that is not installed: {exc} "
                          f"(for MuJoCo environments: pip install -e .[mujoco])") from None


class MaxAndSkipEnv(gym.Wrapper):
    """``env.max_and_skip`` k > 1: every action repeated k times, rewards summed, the observation
    the pixel-wise max of the last two frames (deploy.MaxAndSkip, the code a deployment loop
    calls too)."""

    def __init__(self, env, skip: int):
        super().__init__(env)
        self.max_and_skip = MaxAndSkip(skip)

    def step(self, action):
        return self.max_and_skip.repeat(self.env.step, action)


def make_vec_env(env_cfg: EnvConfig, n_envs: Optional[int] = None):
    """A gymnasium vector env in SAME_STEP autoreset mode (sync or async)."""
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

    n = n_envs or env_cfg.n_envs
    probe = make_env(env_cfg)  # fail early with a clear error on bad ids/spaces
    space_spec(probe.observation_space, probe.action_space, env_cfg.id)
    probe.close()
    fns = [lambda cfg=env_cfg: make_env(cfg, training=True) for _ in range(n)]
    cls = AsyncVectorEnv if env_cfg.vectorization == "async" else SyncVectorEnv
    return cls(fns, autoreset_mode=AutoresetMode.SAME_STEP)


def seed_vec_env(venv, seed: Union[int, Sequence[int]]) -> np.ndarray:
    """Reset with per-env seeds seed+i and seed the action spaces; returns the first observations.
    A population's envs (one seed per member, its envs side by side): member j's envs get its
    seed + i, as its own run's would."""
    seeds = [seed] if isinstance(seed, (int, np.integer)) else list(seed)
    n = venv.num_envs
    obs, _ = venv.reset(seed=[s + i for s in seeds for i in range(n // len(seeds))])
    venv.action_space.seed(seeds[0])
    venv.single_action_space.seed(seeds[0])
    return flat_obs(obs, n)


def step_transitions(venv, actions: np.ndarray):
    """Step the vector env. Returns (obs_for_next_step, reward, terminated, truncated,
    real_next_obs, games).

    ``real_next_obs`` equals ``obs_for_next_step`` except where a sub-env's episode ended:
    there it is the true final observation of the ended episode (from ``info['final_obs']``).
    ``games`` (n, 2) float64: the raw score and length of a whole game that ended at this step
    (atari.GameMonitor, a training env whose episodes are lives), NaN in rows where none did.
    """
    obs, reward, terminated, truncated, info = venv.step(actions)
    n = venv.num_envs
    obs = flat_obs(obs, n)
    real_next = obs
    games = np.full((n, 2), np.nan)
    if "_final_obs" in info:
        mask = info["_final_obs"]
        if np.any(mask):
            real_next = obs.copy()
            for i in np.nonzero(mask)[0]:
                real_next[i] = flat_obs(info["final_obs"][i], 1)[0]
            ended = info["final_info"]
            if "game_return" in ended:
                m = np.asarray(ended["_game_return"], bool)
                games[m, 0] = np.asarray(ended["game_return"], np.float64)[m]
                games[m, 1] = np.asarray(ended["game_length"], np.float64)[m]
    return (obs, np.asarray(reward, dtype=np.float32), np.asarray(terminated, dtype=bool),
            np.asarray(truncated, dtype=bool), real_next, games)


def env_spec(env_cfg: EnvConfig) -> SpaceSpec:
    if env_cfg.pipeline == "overlap" and env_cfg.n_envs < 2:
        raise ConfigError(f"key 'env.pipeline' is 'overlap', but env.n_envs is {env_cfg.n_envs}: the overlap steps "
                          f"one half of the envs while the policy acts on the other, so it needs n_envs >= 2")
    env = make_env(env_cfg)
    try:
        spec = space_spec(env.observation_space, env.action_space, env_cfg.id)
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
