"""A SAC or TD3 population: K members (seeds, or settings of a sweep) trained in one process, with
one graph call per vector step that acts for all K and one per gradient step that updates all K.

Each member is an ordinary run of its algorithm: its own config, run directory, environments
(seeded as its own run seeds them), Generator (warm-up actions, exploration noise, replay
samples), replay buffer, optimizer state, logs, evaluations and checkpoints, so ``msrl eval /
export / verify / plot / train --resume`` use a member as any run. The loop is
off_policy.OffPolicyAlgorithm's with a member axis: the same rounds, warm-up, gradient steps and
draws from each member's Generator in the same order. What the members share is the graph calls
(offpolicy_population_cells.py): a gradient step runs on stacked copies of their Parameters and
writes each member's actor back, and the members act through their own acting cells.

The population directory (``population.json``, the members' directories, ``summary.json``) is
msrl_consistent/populations.py's.
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional

import numpy as np
from mindspore import Tensor

from msrl_consistent.envs import flat_obs, make_vec_env, step_transitions
from msrl_consistent.fastcall import FastCall

from .off_policy import _mean_stats
from .offpolicy_population_cells import STACKED
from .population_base import Population
from .run import RunContext
from .stacked_optim import load_stacked_state, store_member_state


class OffPolicyPopulation(Population):
    """K SAC or TD3 members trained together (see the module docstring)."""

    sweepable = ("algo.learning_rate", "algo.gamma", "algo.tau")
    """The keys ``--sweep`` takes: per-member values in the stacked step."""

    @staticmethod
    def refusal(cfg) -> Optional[str]:
        """Why the stacked graphs cannot train this config's members (None: they can); such a
        population trains its members one after another (population_base.SequentialPopulation)."""
        return "key 'env.normalize_obs' is set" if cfg.env.normalize_obs else None

    def __init__(self, members: List, run_dirs: List[str], run_dir: str, whole: bool = True):
        super().__init__(members, run_dirs, run_dir, whole)
        m0 = members[0]
        self.c = m0.cfg.algo
        self.check_common_step()
        self.stacked = STACKED[m0.name](members)
        rate = self.stacked.per_member_rate
        for name, (opt, pairs) in self.stacked.optimizers.items():
            load_stacked_state(opt, [m.optimizers[name] for m in members], pairs, rate)
        for k, m in enumerate(members):  # a checkpoint of a member holds its current state
            m.before_state = (lambda k=k: self.sync_member(k))
        self._act_fn = FastCall(self.stacked.act)
        self._update_fns: Dict[tuple, FastCall] = {}

    # -- the members' own copies ------------------------------------------------------------------
    def sync_member(self, k: int) -> None:
        """Member k's critics, targets (and temperature) and optimizer state <- its slices of the
        stacked ones (its actor is written by every gradient step)."""
        for stacked, params in self.stacked.host_pairs:
            params[k].copy_(Tensor(stacked.asnumpy()[k]))
        m = self.members[k]
        for name, (opt, pairs) in self.stacked.optimizers.items():
            store_member_state(opt, m.optimizers[name], pairs, k, self.stacked.per_member_rate)

    def before_finish(self) -> None:
        self.sync_parameters()

    def sync_parameters(self) -> None:
        """Every member's Parameters <- the stacked ones (what logs' finite check and hashes read)."""
        for stacked, params in self.stacked.host_pairs:
            values = stacked.asnumpy()
            for k, p in enumerate(params):
                p.copy_(Tensor(values[k]))

    # -- training ---------------------------------------------------------------------------------
    def _fn(self, kind: str, fused: bool) -> FastCall:
        if (kind, fused) not in self._update_fns:
            cell = self.stacked.update_cells[kind]
            self._update_fns[(kind, fused)] = FastCall(self.stacked.fused(cell) if fused else cell)
        return self._update_fns[(kind, fused)]

    def _explore(self, obs: np.ndarray) -> List[tuple]:
        """Every member's (env action, normalized action) for its rows of obs (K, n, obs): one call."""
        noise = np.stack([m.exploration_noise(obs.shape[1]) for m in self.members])
        return self._split(self._act_fn(Tensor(obs), Tensor(noise)).asnumpy())

    def _split(self, out: np.ndarray) -> List[tuple]:
        a = self.members[0].spec.n_actions
        return [(out[k, :, :a], out[k, :, a:]) for k in range(self.k)]

    def _train(self, steps: int, act_obs: Optional[np.ndarray]):
        """``steps`` gradient steps of every member (one graph call each), the last one with the next
        exploration action when ``act_obs`` is given: (each member's round stats, actions or None)."""
        members = self.members
        raw: List[tuple] = []
        actions = None
        for i in range(steps):
            for m in members:
                m.n_updates += 1
            kind = members[0].update_kind(members[0].n_updates)
            packed = Tensor(np.stack([m.packed_batch() for m in members]))
            if act_obs is not None and i == steps - 1:
                noise = np.stack([m.exploration_noise(act_obs.shape[1]) for m in members])
                stats, out = self._fn(kind, True)(packed, Tensor(act_obs), Tensor(noise))
                actions = self._split(out.asnumpy())
            else:
                stats = self._fn(kind, False)(packed)
            raw.append((kind, stats))
        values = [(kind, t.asnumpy()) for kind, t in raw]
        out = []
        for k, m in enumerate(members):
            res = m.summarize([(kind, v[k]) for kind, v in values])
            res["n_updates"] = m.n_updates
            out.append(res)
        return out, actions

    def _loop(self, runs: List[RunContext], signals) -> None:  # noqa: C901 - off_policy.learn_loop with a member axis
        members, m0, c, k = self.members, self.members[0], self.c, self.k
        cfg = m0.cfg
        n = cfg.env.n_envs
        venv = make_vec_env(cfg.env, k * n)  # member k's envs at columns k * n .. (k + 1) * n
        first = venv.reset(seed=[m.env_seed() + i for m in members for i in range(n)])[0]
        obs = flat_obs(first, k * n).reshape(k, n, -1)
        bufs = [m.make_buffer(n) for m in members]
        ep_ret = np.zeros(k * n, np.float64)
        ep_len = np.zeros(k * n, np.int64)
        pending: List[List[Dict[str, float]]] = [[] for _ in members]
        last_log = m0.num_timesteps
        warmup_end = c.learning_starts
        if bufs[0].size == 0 and m0.num_timesteps > 0:
            warmup_end = m0.num_timesteps + c.learning_starts  # resumed without their replay buffers
        clock = time.perf_counter
        next_actions = None
        try:
            while m0.num_timesteps < cfg.total_timesteps:
                collected = 0
                for _ in range(c.train_freq):
                    t0 = clock()
                    if m0.num_timesteps < warmup_end:
                        acts = [m.random_actions(n) for m in members]
                    elif next_actions is not None:
                        acts, next_actions = next_actions, None
                    else:
                        acts = self._explore(obs)
                    t1 = clock()
                    env_a = np.concatenate([e for e, _ in acts])
                    next_obs, rew, term, trunc, real_next = step_transitions(venv, env_a)
                    t2 = clock()
                    real = real_next.reshape(k, n, -1)
                    for i, (m, buf) in enumerate(zip(members, bufs)):
                        rows = slice(i * n, (i + 1) * n)
                        buf.add(obs[i], real[i], acts[i][1], rew[rows], term[rows], trunc[rows])
                        m.num_timesteps += n
                    collected += n
                    ep_ret += rew
                    ep_len += 1
                    for j in np.nonzero(term | trunc)[0]:
                        runs[j // n].episode_done(float(ep_ret[j]), int(ep_len[j]))
                        ep_ret[j], ep_len[j] = 0.0, 0
                    obs = next_obs.reshape(k, n, -1)
                    for run in runs:
                        run.phases["env"] += t2 - t1
                        run.phases["acting"] += t1 - t0
                    if m0.num_timesteps >= cfg.total_timesteps:
                        break
                if m0.num_timesteps > warmup_end and bufs[0].size >= 1:
                    steps = c.gradient_steps if c.gradient_steps > 0 else collected
                    t0 = clock()
                    fused_obs = obs if c.fuse_act and m0.num_timesteps < cfg.total_timesteps else None
                    stats, next_actions = self._train(steps, fused_obs)
                    for p, s in zip(pending, stats):
                        p.append(s)
                    dt = clock() - t0
                    for run in runs:
                        run.update_done(dt)
                for m in members:
                    m.iterations += 1
                step = m0.num_timesteps
                r0 = runs[0]
                if (step - last_log >= c.log_interval or step >= cfg.total_timesteps
                        or self.stop_requested is not None
                        or (r0.next_eval is not None and step >= r0.next_eval)
                        or (r0.next_ckpt is not None and step >= r0.next_ckpt)):
                    self.sync_parameters()
                    for run, p in zip(runs, pending):
                        run.after_iteration(_mean_stats(p))
                    pending, last_log = [[] for _ in members], step
                    if self.stop_requested is not None:
                        self.interrupt(runs, self.stop_requested)
                    signals.reinstall()  # MindSpore replaced the SIGINT handler during the graph calls
        finally:
            venv.close()
