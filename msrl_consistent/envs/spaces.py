"""What the policy cell sees of an environment's spaces: the supported gymnasium spaces as a
:class:`~msrl_consistent.deploy.spaces.SpaceSpec` (a clear refusal of the others), and a batch of
observations as the cell's float32 rows."""
from __future__ import annotations

import numpy as np

from ..config import ConfigError
from ..deploy.fields import PIXEL_VALUES, image_key, row_order
from ..deploy.spaces import SpaceSpec


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
