"""The off-policy loop, once for one run and a population: rounds of ``train_freq`` vector steps
into the replay buffers, then ``gradient_steps`` updates, as Stable-Baselines3's
OffPolicyAlgorithm.learn (off_policy.OffPolicyAlgorithm describes the rules).

A run is the loop over one member. A population (offpolicy_population.py) is the loop over K
members that share the graph calls: one call acts for all K (each member's own acting cell on its
rows) and one call runs a gradient step of all K (its algorithm's step on a MembersView). Every
member keeps its own environments (seeded as its own run seeds them), Generator, replay buffer,
counters and RunContext, and draws from its Generator in the order its own run does.
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Tuple

import numpy as np
from mindspore import Tensor, nn

from msrl_consistent.fastcall import FastCall
from msrl_consistent.pipeline import EnvGroups, EpisodeTally
from msrl_consistent.run_context import RunContext

from .cells import UpdateThenAct


class Rounds:
    """The loop of ``members`` trained by ``graphs`` (``act_cell`` and ``update_cells``: a run's
    own, or a population's stacked ones, ``stacked``: every graph input and output then carries a
    leading member axis). ``owner`` (the run's algorithm, or the population) holds
    ``stop_requested`` and ``log_point(runs, pending)``, what happens at a log point.

    The host arrays carry the member axis in both cases: observations (members, n_envs, obs)."""

    def __init__(self, members: List, graphs, stacked: bool, owner):
        self.members, self.graphs, self.stacked, self.owner = members, graphs, stacked, owner
        self.k = len(members)
        self._fns: Dict[Tuple[str, bool], FastCall] = {}
        self._act_fn: Optional[FastCall] = None
        self._nets: Optional[Tuple[List[FastCall], FastCall]] = None

    # -- graph calls -------------------------------------------------------------------------------
    def _join(self, rows: List[np.ndarray]) -> Tensor:
        """The members' rows as one graph input: stacked on the member axis, or a run's own."""
        return Tensor(np.stack(rows) if self.stacked else rows[0])

    def _split(self, out: np.ndarray) -> List[tuple]:
        """The acting graph's output as each member's (env action, stored action)."""
        if not self.stacked:
            return [self.members[0].split_action(out)]
        return [m.split_action(out[k]) for k, m in enumerate(self.members)]

    def _fn(self, kind: str, fused: bool) -> FastCall:
        """FastCall of an update cell, or of the update cell followed by the acting cell."""
        if (kind, fused) not in self._fns:
            cell = self.graphs.update_cells[kind]
            self._fns[(kind, fused)] = FastCall(UpdateThenAct(cell, self.graphs.act_cell) if fused else cell)
        return self._fns[(kind, fused)]

    def explore(self, obs: np.ndarray, envs: Optional[EnvGroups] = None) -> List[tuple]:
        """Every member's (env action, stored action) for its rows of obs (members, n, obs): one call
        of every row (with ``envs`` each group's envs then start stepping; the acting graph takes every
        row in either pipeline, pipeline.EnvGroups.widen says why)."""
        if self._act_fn is None:
            self._act_fn = FastCall(self.graphs.act_cell)
        noise = [m.exploration_noise(obs.shape[1]) for m in self.members]  # every row's, drawn as one call draws
        acts = self._split(self._act_fn(self._join(list(obs)), self._join(noise)).asnumpy())
        if envs is not None:
            envs.send_all(np.concatenate([e for e, _ in acts]))
        return acts

    def train(self, steps: int, act_obs: Optional[np.ndarray] = None):
        """``steps`` gradient steps of every member (one graph call each), the last one with the next
        exploration action when ``act_obs`` (members, n, obs) is given: (each member's round
        stats, each member's action or None)."""
        members, m0 = self.members, self.members[0]
        for kind in [m.due_cells() for m in members][0]:  # the members' clocks agree
            self.graphs.update_cells[kind]()
        raw: List[tuple] = []
        actions = None
        for i in range(steps):
            for m in members:
                m.n_updates += 1
            kind = m0.update_kind(m0.n_updates)
            packed = self._join([m.packed_batch() for m in members])
            if act_obs is not None and i == steps - 1:
                noise = self._join([m.exploration_noise(act_obs.shape[1]) for m in members])
                stats, out = self._fn(kind, True)(packed, self._join(list(act_obs)), noise)
                actions = self._split(out.asnumpy())
            else:
                stats = self._fn(kind, False)(packed)
            raw.append((kind, stats))
        values = [(kind, t.asnumpy()) for kind, t in raw]
        out = []
        for k, m in enumerate(members):
            res = m.summarize([(kind, v[k] if self.stacked else v) for kind, v in values])
            res["n_updates"] = m.n_updates
            out.append(res)
        return out, actions

    # -- the rollout/update mismatch --------------------------------------------------------------------
    def mismatch(self, max_acting_calls: int = 8) -> List[Optional[float]]:
        """Each member's max |difference| between its policy network's outputs (SAC's pre-squash mean,
        TD3's pre-squash action, DQN's Q-values) as acting computes them (its own cells, n_envs rows
        per call) and as the update computes them (the update's batch shape; a population's stacked
        networks), at the same parameters, on its replay buffer's newest observations (None: fewer
        than a batch yet). Read-only: no Generator draw, no parameter change."""
        members, m0 = self.members, self.members[0]
        n, rows = m0.cfg.env.n_envs, m0.rank_batch_size
        recent = [m.buffer.newest(rows) if m.buffer is not None else None for m in members]
        if any(r is None for r in recent):
            return [None] * len(members)
        if self._nets is None:
            own = [FastCall(PolicyNet(m.agent)) for m in members]
            self._nets = (own, FastCall(PolicyNet(self.graphs.view)) if self.stacked else own[0])
        own, update = self._nets
        updated = update(self._join(recent)).asnumpy()
        out = []
        for k, obs in enumerate(recent):
            calls = min(rows // n, max_acting_calls)
            acting = np.concatenate([own[k](Tensor(obs[i * n:(i + 1) * n])).asnumpy() for i in range(calls)])
            mine = updated[k] if self.stacked else updated
            out.append(float(np.max(np.abs(acting - mine[:len(acting)]))))
        return out

    # -- the loop ------------------------------------------------------------------------------------
    def loop(self, runs: List[RunContext]) -> None:  # noqa: C901 - SB3's collect/train/log cycle, kept in one place
        members, m0, k = self.members, self.members[0], self.k
        cfg, c = m0.cfg, m0.cfg.algo
        n = cfg.env.n_envs
        world = m0.dist.world  # num_timesteps counts every rank's steps
        envs = EnvGroups(cfg.env, k)  # member i's envs at columns i * n .. (i + 1) * n; env.pipeline's groups
        obs = envs.reset([m.env_seed() for m in members]).reshape(k, n, -1)
        bufs = [m.make_buffer(n) for m in members]
        for m in members:
            m.start_rounds()
        episodes = EpisodeTally(runs, n, envs.reports_games)
        pending: List[List[Dict[str, float]]] = [[] for _ in members]
        last_log = m0.num_timesteps
        warmup_end = c.learning_starts
        if bufs[0].size == 0 and m0.num_timesteps > 0:
            warmup_end = m0.num_timesteps + c.learning_starts  # resumed without the replay buffer
        fuse = bool(c.fuse_act) and all(m.obs_rms is None for m in members)
        clock = time.perf_counter
        next_actions = None  # exploration actions for `obs` computed by the last (fused) update call
        try:
            while m0.num_timesteps < cfg.total_timesteps:
                collected = 0
                for _ in range(c.train_freq):
                    t0 = clock()
                    if m0.num_timesteps < warmup_end or next_actions is not None:
                        if m0.num_timesteps < warmup_end:
                            acts = [m.random_actions(n) for m in members]
                        else:
                            acts, next_actions = next_actions, None
                        envs.send_all(acts[0][0] if k == 1 else np.concatenate([e for e, _ in acts]))
                    else:
                        acts = self.explore(obs, envs)  # then each group's envs step
                    t1 = clock()
                    next_obs, rew, term, trunc, real_next, games = (envs.join(list(p))
                                                             for p in zip(*[envs.recv(g) for g in range(envs.groups)]))
                    t2 = clock()
                    real = real_next.reshape(k, n, -1)
                    for i, (m, buf) in enumerate(zip(members, bufs)):
                        rows = slice(i * n, (i + 1) * n)
                        buf.add(obs[i], real[i], acts[i][1], rew[rows], term[rows], trunc[rows])
                        m.num_timesteps += n * world
                        if m.obs_rms is not None:  # every rank's observations, merged in rank order
                            m.obs_rms.update(m.dist.allgather(obs[i]))
                    collected += n  # this rank's steps: gradient_steps -1 runs as many updates
                    episodes.step(rew, term | trunc, games)
                    obs = next_obs.reshape(k, n, -1)
                    for run in runs:
                        run.phases["env"] += t2 - t1
                        run.phases["acting"] += t1 - t0
                    if m0.num_timesteps >= cfg.total_timesteps:
                        break
                if m0.num_timesteps > warmup_end and bufs[0].size >= 1:  # SB3: train once past learning_starts
                    # every rank takes part in every gradient step: N ranks keep one process's ratio
                    steps = (c.gradient_steps if c.gradient_steps > 0 else collected) * world
                    t0 = clock()
                    fused_obs = obs if fuse and m0.num_timesteps < cfg.total_timesteps else None
                    stats, next_actions = self.train(steps, fused_obs)
                    for p, s in zip(pending, stats):
                        p.append(s)
                    dt = clock() - t0
                    for run in runs:
                        run.update_done(dt)
                for m in members:
                    m.sync_normalizer()  # new statistics take effect after the update (frozen during a round)
                    m.iterations += 1
                # One log line (and the eval/checkpoint check) per log_interval steps, not per round:
                # RunContext.after_iteration (tensorboard + jsonl) costs as much as a small update.
                step, r0 = m0.num_timesteps, runs[0]
                if (step - last_log >= c.log_interval or step >= cfg.total_timesteps
                        # a signal: checkpoint after this round. Data parallel: only at the log points
                        # every rank reaches together (each rank sees a forwarded signal at its own
                        # moment; a rank entering after_iteration's collective alone would meet the
                        # others' gradient all-reduce)
                        or (self.owner.stop_requested is not None and not m0.dist.enabled)
                        or (r0.next_eval is not None and step >= r0.next_eval)
                        or (r0.next_ckpt is not None and step >= r0.next_ckpt)):
                    t0 = clock()
                    for p, figure in zip(pending, self.mismatch()):
                        if p and figure is not None:
                            p[-1]["mismatch_max"] = figure
                    for run in runs:  # the monitor's cost, in summary.json's phase_seconds
                        run.phases["monitor"] = run.phases.get("monitor", 0.0) + clock() - t0
                    self.owner.log_point(runs, pending)
                    pending, last_log = [[] for _ in members], step
        finally:
            envs.close()


class PolicyNet(nn.Cell):
    """The agent's policy network on normalized observations (one run's, or a MembersView's).

    Built without renaming the agent's Parameters (auto_prefix=False): a population's members'
    Parameters would otherwise take the names the update step gives its stacked ones, and a graph
    compiled after the first mismatch check would refuse the duplicates."""

    def __init__(self, agent):
        super().__init__(auto_prefix=False)
        self.agent = agent

    def construct(self, obs):
        return self.agent.actor(self.agent.normalizer(obs))


def mean_stats(rounds: List[Dict[str, float]]) -> Dict[str, float]:
    """Per-key mean over training rounds (counters such as n_updates: the last value)."""
    out: Dict[str, float] = {}
    for key in {key for r in rounds for key in r}:
        vals = [r[key] for r in rounds if key in r]
        out[key] = vals[-1] if key.startswith("n_") else float(np.mean(vals))
    out["train_rounds"] = len(rounds)
    return out
