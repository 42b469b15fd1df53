"""The one episode runner: seeded episodes of a policy, used by training-time evaluation,
``msrl eval``, ``msrl verify`` (side-by-side rollouts), ``msrl replay`` and the precision sweep.

Episode i is reset with seed ``seed + i``. The policy ``act`` takes a batch of one observation
(float32, shape (1, obs_dim)) and returns a batch of one action; the environment gets an int
for a Discrete action space and a float32 vector for a Box, decided once from the env's
spaces (never from the dtype the policy happened to return).
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional

import numpy as np

from .config import EnvConfig
from .deploy import FrameStack
from .envs import flat_obs, make_env, space_spec

Act = Callable[[np.ndarray], np.ndarray]


def run_episodes(env_cfg: EnvConfig, act: Act, episodes: int, seed: int, on_step=None,
                 reference: Optional[Act] = None, trajectories: bool = False) -> Dict[str, list]:
    """Roll out ``act`` for ``episodes`` seeded episodes.

    Returns ``returns``, ``lengths`` and ``latencies`` (the wall time of every ``act`` call, in
    seconds). ``on_step(episode, t, obs, action, reward, done)`` is called after every step.
    With ``reference``, the reference policy's action for the same observation is computed at
    every step as well (it does not drive the env); with ``trajectories`` (or a reference), the
    result also holds ``episodes``: per episode ``obs`` (T, obs_dim), ``act`` (T, ...) and
    ``ref`` (the reference's actions, or None)."""
    env = make_env(env_cfg)
    spec = space_spec(env.observation_space, env.action_space, env_cfg.id)
    keep = trajectories or reference is not None
    returns: List[float] = []
    lengths: List[int] = []
    latencies: List[float] = []
    runs: List[dict] = []
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            env.action_space.seed(seed + ep)
            for f in (act, reference):  # a policy that stacks frames or carries a state starts each episode afresh
                getattr(getattr(f, "__self__", None), "reset", lambda: None)()
            done, ret, t = False, 0.0, 0
            traj_obs, traj_act, traj_ref = [], [], []
            while not done:
                batch = flat_obs(obs, 1)
                t0 = time.perf_counter()
                action = np.asarray(act(batch))
                latencies.append(time.perf_counter() - t0)
                flat = action.reshape(-1)
                if keep:
                    traj_obs.append(batch[0])
                    traj_act.append(flat)
                    if reference is not None:
                        traj_ref.append(np.asarray(reference(batch)).reshape(-1))
                a = flat.astype(np.float32) if not spec.discrete else (
                    int(flat[0]) if spec.act_kind == "Discrete" else flat.astype(np.int64))
                obs, r, term, trunc, _ = env.step(a)
                ret += float(r)
                done = bool(term or trunc)
                if on_step is not None:
                    on_step(ep, t, batch[0], a, float(r), done)
                t += 1
            returns.append(ret)
            lengths.append(t)
            if keep:
                runs.append({"obs": np.asarray(traj_obs), "act": np.asarray(traj_act),
                             "ref": np.asarray(traj_ref) if reference is not None else None, "return": ret})
    finally:
        env.close()
    out = {"returns": returns, "lengths": lengths, "latencies": latencies}
    if keep:
        out["episodes"] = runs
    return out


def run_episodes_batched(env_cfg: EnvConfig, act: Act, episodes: int, seed: int,
                         frame_stack: int = 1, reset: Optional[Callable[[np.ndarray], None]] = None) -> Dict[str, list]:
    """The same seeded episodes as :func:`run_episodes`, run side by side: one vector env of
    ``episodes`` envs (env i reset with seed ``seed + i``) and one ``act`` call per step for all
    of them, so an evaluation of E episodes costs max(length) policy calls instead of
    sum(lengths). Finished envs keep stepping (SAME_STEP autoreset) until the last episode ends;
    their later rewards are not counted. ``frame_stack`` k > 1: ``act`` gets the k latest
    observations of each env (deploy.FrameStack, restarted where an episode ended). ``reset``
    (a recurrent policy's ``RecurrentState.reset``) is called with the mask of the envs whose
    episode ended at a step, before the next ``act``.

    Discrete actions are the same as at batch 1 (argmax of the same logits up to ~1e-7); a
    continuous policy's actions at batch E can differ from batch 1 by ~1e-7 (other kernel
    blocking), so its returns can differ from :func:`run_episodes` in the last digits."""
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    probe = make_env(env_cfg)
    spec = space_spec(probe.observation_space, probe.action_space, env_cfg.id)
    probe.close()
    venv = SyncVectorEnv([lambda: make_env(env_cfg) for _ in range(episodes)], autoreset_mode=AutoresetMode.SAME_STEP)
    returns = np.zeros(episodes, np.float64)
    lengths = np.zeros(episodes, np.int64)
    done = np.zeros(episodes, bool)
    latencies: List[float] = []
    try:
        obs, _ = venv.reset(seed=[seed + i for i in range(episodes)])
        stack = FrameStack(frame_stack, flat_obs(obs, episodes).shape[1]) if frame_stack > 1 else None
        ended = None
        while not done.all():
            batch = flat_obs(obs, episodes)
            if stack is not None:
                batch = stack.push(batch, ended)
            t0 = time.perf_counter()
            action = np.asarray(act(batch))
            latencies.append(time.perf_counter() - t0)
            a = action.reshape((episodes,) + spec.action_shape).astype(np.int64) if spec.discrete else \
                action.reshape(episodes, -1).astype(np.float32)
            obs, r, term, trunc, _ = venv.step(a)
            live = ~done
            returns[live] += np.asarray(r, np.float64)[live]
            lengths[live] += 1
            ended = np.asarray(term, bool) | np.asarray(trunc, bool)
            done |= ended
            if reset is not None and ended.any():
                reset(ended)
    finally:
        venv.close()
    return {"returns": [float(x) for x in returns], "lengths": [int(x) for x in lengths], "latencies": latencies}
