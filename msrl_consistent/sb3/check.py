"""The imported cell against SB3's own predictions: ``predict(obs, deterministic=True)``.

``compare_predictions`` runs the imported run's training-time policy cell (runtime.TrainCellPolicy,
the cell every export is verified against) on the observations and compares: integer actions
(Discrete, MultiDiscrete, MultiBinary) must all be identical, continuous actions within
``CONTINUOUS_ATOL``. ``sb3_predictions`` makes the observations and SB3's actions itself, with
Stable-Baselines3 installed (SB3's load runs the zip's pickles: for files the user trusts).
"""
from __future__ import annotations

import pickle
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..config import ConfigError

CONTINUOUS_ATOL = 1e-5
SB3_INSTALL = 'pip install stable-baselines3   (or: pip install "msrl-consistent[bench]")'
SB3_CLASSES = {"ppo": "PPO", "a2c": "A2C", "sac": "SAC", "td3": "TD3", "dqn": "DQN"}


def compare_predictions(run_dir: str, obs: np.ndarray, actions: np.ndarray, source: str) -> Dict[str, Any]:
    """The comparison's figures (what summary.json's ``check`` holds); ``passed`` by the stated rule."""
    from ..runtime import TrainCellPolicy

    policy = TrainCellPolicy(run_dir)
    spec = policy.spec
    x = np.asarray(obs).reshape(len(obs), -1).astype(spec.input_dtype)
    if x.shape[1] != spec.obs_dim:
        raise ConfigError(f"--check {source}: observations of {x.shape[1]} values, the policy takes {spec.obs_dim}")
    ours = np.asarray(policy.act(x))
    theirs = np.asarray(actions).reshape(ours.shape) if np.asarray(actions).size == ours.size else None
    if theirs is None:
        raise ConfigError(f"--check {source}: 'actions' has shape {np.shape(actions)}, the policy's are {ours.shape}")
    out: Dict[str, Any] = {"source": source, "observations": int(len(x))}
    if spec.discrete:
        same = np.all(ours.reshape(len(x), -1) == theirs.reshape(len(x), -1).astype(np.int64), axis=1)
        out.update(kind="discrete", identical_fraction=float(same.mean()), mismatched_rows=int((~same).sum()),
                   criterion="every action identical", passed=bool(same.all()))
    else:
        diff = float(np.max(np.abs(ours.astype(np.float64) - theirs.astype(np.float64))))
        out.update(kind="continuous", max_abs_diff=diff, criterion=f"max |diff| <= {CONTINUOUS_ATOL:g}",
                   passed=bool(diff <= CONTINUOUS_ATOL))
    return out


def env_observations(env_cfg, n: int, seed: int = 0) -> np.ndarray:
    """``n`` observations of seeded episodes with uniformly random actions (the env's own spaces)."""
    from ..envs import make_env

    env = make_env(env_cfg)
    env.action_space.seed(seed)
    rows = []
    o, _ = env.reset(seed=seed)
    while len(rows) < n:
        rows.append(np.asarray(o))
        o, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            o, _ = env.reset()
    env.close()
    return np.stack(rows)


def sb3_predictions(zip_path: str, env_cfg, vecnormalize: Optional[str], spec, n: int = 256) -> Tuple[np.ndarray, np.ndarray]:
    """(obs, SB3's deterministic actions) for ``n`` env observations, Stable-Baselines3 loading the
    zip (and VecNormalize's pickle) itself."""
    from ..optional import require
    from .archive import read_model

    sb3 = require("stable_baselines3", "msrl import --check sb3", SB3_INSTALL)
    cls = getattr(sb3, SB3_CLASSES[read_model(zip_path).algorithm])
    model = cls.load(zip_path, device="cpu")
    obs = env_observations(env_cfg, n)
    x = obs
    if vecnormalize:
        with open(vecnormalize, "rb") as fh:
            x = pickle.load(fh).normalize_obs(obs)  # trusted: SB3 itself was asked to load this model
    actions, _ = model.predict(x, deterministic=True)
    return obs, np.asarray(actions)
