"""The one episode runner: seeded episodes of a policy, used by training-time evaluation,
``msrl eval``, ``msrl verify`` (side-by-side rollouts), ``msrl replay``, the exporter's golden set
and the precision sweep.

Episode i is reset with seed ``seed + i``: one after the other in one env, or side by side
(``side_by_side``: one vector env, one ``act`` call per step for all of them). Either way the
same loop steps them, with one protocol for what a policy carries across steps and one action
conversion:

* ``act`` takes a batch of observation rows (float32, or uint8 for images) and returns a batch
  of actions; the env gets them as :func:`env_actions` converts them, decided once from the env's
  spaces (never from the dtype the policy happened to return).
* ``reset(mask)`` is called with None before the first step of every episode (one env) or of all
  of them (side by side), and with the boolean mask of the envs whose episode ended at a step
  where others go on. A recurrent policy's state (deploy.RecurrentState.reset, deploy.Policy.reset)
  and frame stacking restart there. Without a ``reset``, a deploy Policy behind ``act`` and
  ``reference`` is reset by its own ``reset``.
* ``frame_stack`` k > 1: the runner stacks the k latest observations of each env
  (deploy.FrameStack, restarted where an episode ended), for an ``act`` that does not stack them
  itself (a deploy Policy does).
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional

import numpy as np

from .config import EnvConfig
from .deploy import FrameStack, Policy
from .envs import flat_obs, make_env, space_spec

Act = Callable[[np.ndarray], np.ndarray]
Reset = Callable[[Optional[np.ndarray]], None]


def env_actions(spec, action: np.ndarray, n: int) -> np.ndarray:
    """A batch of ``n`` policy actions as the env steps them: int64 indices (Discrete,
    MultiDiscrete, MultiBinary) or float32 vectors (Box), each of the space's action shape."""
    return np.asarray(action).reshape((n,) + spec.action_shape).astype(np.int64 if spec.discrete else np.float32)


def _one(spec, a: np.ndarray):
    """One env's action: a Python int for a Discrete space, the array otherwise."""
    return int(a) if spec.act_kind == "Discrete" else a


def policy_reset(*acts: Optional[Act]) -> Reset:
    """The reset of the deploy Policies behind ``acts`` (bound ``act`` methods); others carry nothing."""
    owners = [getattr(a, "__self__", None) for a in acts]
    policies = [p for p in owners if isinstance(p, Policy)]

    def reset(mask: Optional[np.ndarray]) -> None:
        for p in policies:
            p.reset(mask)
    return reset


class _OneEnv:
    """One env, its episodes one after the other."""

    def __init__(self, env):
        self.env = env

    def reset(self, seeds: List[int]) -> np.ndarray:
        obs, _ = self.env.reset(seed=seeds[0])
        self.env.action_space.seed(seeds[0])
        return flat_obs(obs, 1)

    def step(self, spec, actions: np.ndarray):
        obs, r, term, trunc, _ = self.env.step(_one(spec, actions[0]))
        return flat_obs(obs, 1), np.array([r], np.float64), np.array([bool(term or trunc)])


class _VectorEnv:
    """``n`` envs stepped together (SAME_STEP autoreset: a finished env steps on until the last
    episode ends; its later rewards are not counted)."""

    def __init__(self, venv, n: int):
        self.venv, self.n = venv, n

    def reset(self, seeds: List[int]) -> np.ndarray:
        obs, _ = self.venv.reset(seed=seeds)
        return flat_obs(obs, self.n)

    def step(self, spec, actions: np.ndarray):
        obs, r, term, trunc, _ = self.venv.step(actions)
        return flat_obs(obs, self.n), np.asarray(r, np.float64), np.asarray(term, bool) | np.asarray(trunc, bool)


class EvaluationStopped(Exception):
    """``run_episodes``' ``stop`` returned a signal number: the episodes were abandoned."""

    def __init__(self, signum: int):
        super().__init__(f"evaluation stopped by signal {signum}")
        self.signum = int(signum)


def _play(envs, spec, n: int, seeds: List[int], act: Act, reset: Reset, frame_stack: int, latencies: list,
          on_step=None, reference: Optional[Act] = None, keep: bool = False, max_steps: Optional[int] = None,
          stop=None):
    """Step ``n`` envs from their seeds until every episode ended (or ran ``max_steps``):
    (returns, lengths, trajectories)."""
    obs = envs.reset(seeds)
    reset(None)
    stack = FrameStack(frame_stack, obs.shape[1]) if frame_stack > 1 else None
    returns, lengths = np.zeros(n, np.float64), np.zeros(n, np.int64)
    done, ended = np.zeros(n, bool), None
    trajs: List[Dict[str, list]] = [{"obs": [], "act": [], "ref": []} for _ in range(n)]
    while not done.all():
        signum = None if stop is None else stop()
        if signum:
            raise EvaluationStopped(signum)
        x = stack.push(obs, ended) if stack is not None else obs
        t0 = time.perf_counter()
        action = np.asarray(act(x))
        latencies.append(time.perf_counter() - t0)
        live = ~done
        if keep:
            rows = action.reshape(n, -1)
            ref = np.asarray(reference(x)).reshape(n, -1) if reference is not None else None
            for i in np.flatnonzero(live):
                trajs[i]["obs"].append(obs[i])
                trajs[i]["act"].append(rows[i])
                if ref is not None:
                    trajs[i]["ref"].append(ref[i])
        a = env_actions(spec, action, n)
        next_obs, r, ended = envs.step(spec, a)
        returns[live] += r[live]
        lengths[live] += 1
        if on_step is not None:
            for i in np.flatnonzero(live):
                on_step(i, int(lengths[i]) - 1, obs[i], _one(spec, a[i]), float(r[i]), bool(ended[i]))
        obs = next_obs
        if max_steps is not None:
            ended = ended | (lengths >= max_steps)
        done |= ended
        if ended.any() and not done.all():
            reset(ended)
    return returns, lengths, trajs


def run_episodes(env_cfg: EnvConfig, act: Act, episodes: int, seed: int, on_step=None,
                 reference: Optional[Act] = None, trajectories: bool = False, *, side_by_side: bool = False,
                 frame_stack: int = 1, reset: Optional[Reset] = None, max_steps: Optional[int] = None,
                 stop=None) -> Dict[str, list]:
    """Roll out ``act`` for ``episodes`` seeded episodes (each ended after ``max_steps`` steps when
    given; ``stop()``, asked before every step, returns a signal number to abandon them with
    EvaluationStopped).

    Returns ``returns``, ``lengths`` and ``latencies`` (the wall time of every ``act`` call, in
    seconds). ``on_step(episode, t, obs, action, reward, done)`` is called after every step.
    With ``reference``, the reference policy's action for the same observation is computed at
    every step as well (it does not drive the env); with ``trajectories`` (or a reference), the
    result also holds ``episodes``: per episode ``obs`` (T, obs_dim), ``act`` (T, ...) and
    ``ref`` (the reference's actions, or None).

    ``side_by_side``: the episodes in one vector env, one ``act`` call per step for all of them
    (an evaluation of E episodes costs max(length) policy calls instead of sum(lengths)).
    Discrete actions are the same as one env at a time (argmax of the same logits up to ~1e-7);
    a continuous policy's actions at batch E can differ from batch 1 by ~1e-7 (other kernel
    blocking), so its returns can differ in the last digits."""
    reset = reset or policy_reset(act, reference)
    keep = trajectories or reference is not None
    latencies: List[float] = []
    if side_by_side:
        from gymnasium.vector import AutoresetMode, SyncVectorEnv
        probe = make_env(env_cfg)
        spec = space_spec(probe.observation_space, probe.action_space, env_cfg.id)
        probe.close()
        venv = SyncVectorEnv([lambda: make_env(env_cfg) for _ in range(episodes)],
                             autoreset_mode=AutoresetMode.SAME_STEP)
        close = venv.close
        rounds: list = [(_VectorEnv(venv, episodes), episodes, [seed + i for i in range(episodes)])]
    else:
        env = make_env(env_cfg)
        close = env.close
        spec = space_spec(env.observation_space, env.action_space, env_cfg.id)
        rounds = [(_OneEnv(env), 1, [seed + ep]) for ep in range(episodes)]
    returns: List[float] = []
    lengths: List[int] = []
    runs: List[dict] = []
    try:
        for lanes, n, seeds in rounds:
            first = len(returns)
            step = None if on_step is None else (lambda i, *rest, first=first: on_step(first + i, *rest))
            rets, lens, trajs = _play(lanes, spec, n, seeds, act, reset, frame_stack, latencies, step, reference, keep,
                                      max_steps, stop)
            returns += [float(x) for x in rets]
            lengths += [int(x) for x in lens]
            if keep:
                runs += [{"obs": np.asarray(tr["obs"]), "act": np.asarray(tr["act"]),
                          "ref": np.asarray(tr["ref"]) if reference is not None else None, "return": float(ret)}
                         for tr, ret in zip(trajs, rets)]
    finally:
        close()
    out: Dict[str, list] = {"returns": returns, "lengths": lengths, "latencies": latencies}
    if keep:
        out["episodes"] = runs
    return out
