"""gymnasium vector envs: construction, seeding, autoreset handling.

The vector envs run in gymnasium's SAME_STEP autoreset mode: the step that ends an
episode returns the first observation of the next one and puts the true final
observation in ``info["final_obs"]``. :func:`step_transitions` turns that into
transitions that never span two episodes: ``next_obs`` is the true final observation for
every ended sub-env, so truncated episodes bootstrap from it and terminated ones do not
(their ``terminated`` flag zeroes the bootstrap).
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

from ..config import EnvConfig
from .make import make_env
from .spaces import flat_obs, space_spec


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
