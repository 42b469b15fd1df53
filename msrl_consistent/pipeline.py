"""The training envs as groups of columns that step while the policy acts on another group.

``env.pipeline: sequential`` (the default) is one group: the policy acts on every env, then every
env steps, in the caller's thread. ``env.pipeline: overlap`` is two groups (each member's first
and second half of its ``n_envs`` envs): while one group's envs step in a worker thread (their
own processes too with ``env.vectorization: async``), the acting graph runs on the other
group's rows, which MindSpore runs with the GIL released (PPO's rollout; the off-policy loop acts
on every row in one call, then both groups' envs step at once). It is the asynchronous pipeline NPU
deployment guides describe (env simulation on the host overlapped with inference on the
device); on this CPU it pays where an env step costs as much as an acting call (Atari).

What the overlap changes and what it does not: every env keeps its seed and its column in the
buffer, actions reach each env in the same order, and every Generator draw happens in the same
order, so a run is as reproducible as a sequential one. The acting graph runs at the full batch
shape in both pipelines, a group's rows in their own columns (:meth:`EnvGroups.widen`): a CPU
MatMul rounds a row by the blocking it picks for the row count (oneDNN's AVX2 kernel rounds an
8-row batch's rows 0-5 and 6-7 in two blocks, and 4 rows otherwise), so only the same shape with
the row in the same place gives every row the sequential call's bits, on every CPU. The run is
bit-identical to the sequential one; the price is an acting call of every row per group.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import List, Optional, Sequence

import numpy as np

from .config import EnvConfig
from .envs import make_vec_env, seed_vec_env, step_transitions
from .envs.atari import reports_games


def group_ranges(n_envs: int, pipeline: str) -> List[range]:
    """Which of a member's ``n_envs`` envs each group holds: all of them, or two halves (the
    config's n_envs >= 2 is checked with the spaces, envs.env_spec)."""
    if pipeline == "sequential" or n_envs < 2:
        return [range(n_envs)]
    half = n_envs - n_envs // 2
    return [range(half), range(half, n_envs)]


class EnvGroups:
    """``members`` x ``env_cfg.n_envs`` training envs (member i's at columns i * n .. (i + 1) * n
    of every full-width array), as one group or two (``env_cfg.pipeline``). ``cols[g]``: group g's
    columns, member after member, so a group's rows reshape to (members, envs of the group, ...)."""

    def __init__(self, env_cfg: EnvConfig, members: int = 1):
        n = env_cfg.n_envs
        self.n, self.members = n, members
        self.ranges = group_ranges(n, env_cfg.pipeline)
        self.cols = [np.array([i * n + j for i in range(members) for j in r], np.int64) for r in self.ranges]
        self.overlap = len(self.ranges) > 1
        self.reports_games = reports_games(env_cfg.atari)
        """The training envs report whole games (atari.GameMonitor): their episodes are lives."""
        self._pool: Optional[ThreadPoolExecutor] = None
        self._pending: List[Optional[Future]] = [None] * len(self.ranges)
        self._actions: List[Optional[np.ndarray]] = [None] * len(self.ranges)
        self._wide: dict = {}  # widen's full-width arrays, by row shape and dtype
        self.venvs: list = []
        try:  # a group that fails to start closes the ones already started (close() needs the fields above)
            for c in self.cols:
                self.venvs.append(make_vec_env(env_cfg, len(c)))
        except BaseException:
            self.close()
            raise
        if self.overlap:
            self._pool = ThreadPoolExecutor(len(self.venvs), "msrl-envs")

    @property
    def groups(self) -> int:
        return len(self.venvs)

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        """Seed and reset every env as one vector env of all columns would be (member j's env i:
        seeds[j] + i); returns the first observations of all columns."""
        parts = [seed_vec_env(v, [s + r.start for s in seeds]) for v, r in zip(self.venvs, self.ranges)]
        return self.join(parts)

    def join(self, parts: List[np.ndarray]) -> np.ndarray:
        """Full-width rows from each group's rows."""
        if len(parts) == 1:
            return parts[0]
        out = np.empty((self.members * self.n,) + parts[0].shape[1:], parts[0].dtype)
        for c, p in zip(self.cols, parts):
            out[c] = p
        return out

    def widen(self, g: int, rows: np.ndarray) -> np.ndarray:
        """Group g's rows in their columns of a full-width array: the acting graph's input, so it runs
        at one batch shape in either pipeline and gives each row the sequential call's bits (the
        module's docstring says why). The other columns hold earlier rows, whose outputs the caller
        drops with :meth:`narrow`; the array is reused by the next call."""
        if not self.overlap:
            return rows
        key = (rows.shape[1:], rows.dtype.str)
        if key not in self._wide:
            self._wide[key] = np.zeros((self.members * self.n,) + rows.shape[1:], rows.dtype)
        wide = self._wide[key]
        wide[self.cols[g]] = rows
        return wide

    def narrow(self, g: int, wide: np.ndarray) -> np.ndarray:
        """Group g's rows of a full-width array (the acting graph's output for :meth:`widen`'s input)."""
        return wide[self.cols[g]] if self.overlap else wide

    def send_all(self, actions: np.ndarray) -> None:
        """Every group's step with its columns of the full-width ``actions``."""
        for g in range(self.groups):
            self.send(g, self.narrow(g, actions))

    def send(self, g: int, actions: np.ndarray) -> None:
        """Start group g's step with its actions (sequential: the step runs in :meth:`recv`)."""
        if self._pool is None:
            self._actions[g] = actions
        else:
            self._pending[g] = self._pool.submit(step_transitions, self.venvs[g], actions)

    def recv(self, g: int):
        """Group g's step results: (obs, reward, terminated, truncated, real_next, games), its rows
        (envs.step_transitions)."""
        if self._pool is None:
            actions, self._actions[g] = self._actions[g], None
            return step_transitions(self.venvs[g], actions)
        future, self._pending[g] = self._pending[g], None
        return future.result()

    def close(self) -> None:
        for f in self._pending:
            if f is not None:  # a step in flight (an interrupted run): let it finish before closing its envs
                try:
                    f.result()
                except Exception:  # noqa: BLE001 - the run is already ending with its own error
                    pass
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for v in self.venvs:
            v.close()


class EpisodeTally:
    """Each column's running episode return and length, handed to its member's run
    (RunContext.episode_done, the run's recent_mean_return) when the episode ends: the training
    episode's, or with ``games`` (EnvGroups.reports_games) the whole game's raw score and length
    where one ended, as SB3's Monitor under its AtariWrapper records them (a life is not an
    episode there, and the score is not clipped)."""

    def __init__(self, runs: Sequence, n: int, games: bool = False):
        self.runs, self.n, self.games = runs, n, games
        self.ret = np.zeros(len(runs) * n, np.float64)
        self.len = np.zeros(len(runs) * n, np.int64)

    def step(self, reward: np.ndarray, done: np.ndarray, games: np.ndarray) -> None:
        """One vector step of every column: its rewards, episode ends and ended games
        (step_transitions' ``games``)."""
        self.ret += reward
        self.len += 1
        for i in np.nonzero(done)[0]:
            if not self.games:
                self.runs[i // self.n].episode_done(float(self.ret[i]), int(self.len[i]))
            self.ret[i], self.len[i] = 0.0, 0
        if self.games:
            for i in np.nonzero(~np.isnan(games[:, 0]))[0]:
                self.runs[i // self.n].episode_done(float(games[i, 0]), int(games[i, 1]))
