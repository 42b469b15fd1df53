"""An off-policy population (DQN, SAC or TD3): K members (seeds, or settings of a sweep) trained in
one process, with one graph call per vector step that acts for all K and one per gradient step
that updates all K.

Each member is an ordinary run of its algorithm: its own config, run directory, environments
(seeded as its own run seeds them), Generator (warm-up actions, exploration noise, replay
samples), replay buffer, optimizer state, logs, evaluations and checkpoints, so ``msrl eval /
export / verify / plot / train --resume`` use a member as any run. The loop is the run's own
(off_policy_loop.Rounds) over K members. What the members share is the graph calls: a gradient
step is the algorithm's own step cell on a MembersView of their networks (stacked Parameters,
one BatchMatMul per layer for all K), which writes each member's acting Parameters back into the
member's own; the members act through their own acting cells (the exported policy cell's ops),
side by side in one graph, so a member explores with exactly the numbers its exported cell
computes. The other stacked Parameters (critics, targets, SAC's temperature) are copied into the
members on the host when logs, checkpoints or the end of training read them.

The population directory (``population.json``, the members' directories, ``summary.json``) is
msrl_consistent/populations.py's.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np
from mindspore import Tensor, nn, ops

from msrl_consistent.networks.stacked import MembersView, WriteBack
from msrl_consistent.populations.base import Population
from msrl_consistent.populations.stacked_optim import load_stacked_state, stacked_optimizer, store_member_state
from msrl_consistent.run_context import RunContext

from .cells import per_member
from .off_policy_loop import Rounds, mean_stats


class MembersAct(nn.Cell):
    """Every member's own acting cell on its rows: obs (K, n, obs), noise (K, n, ...) -> the cells'
    outputs (K, n, width)."""

    def __init__(self, acts: Sequence[nn.Cell]):
        super().__init__()
        self.acts = nn.CellList(list(acts))
        self.k = len(acts)

    def construct(self, obs, noise):
        return ops.stack([self.acts[k](obs[k], noise[k]) for k in range(self.k)])


class OffPolicyPopulation(Population):
    """K members of one off-policy algorithm trained together (see the module docstring)."""

    sweepable = ("algo.learning_rate", "algo.gamma", "algo.tau")
    """The keys ``--sweep`` takes: per-member values in the stacked step."""

    @staticmethod
    def refusal(cfg) -> Optional[str]:
        """Why the stacked graphs cannot train this config's members (None: they can); such a
        population trains its members one after another (msrl_consistent.populations.base.SequentialPopulation)."""
        return "key 'env.normalize_obs' is set" if cfg.env.normalize_obs else None

    def __init__(self, members: List, run_dirs: List[str], run_dir: str, whole: bool = True):
        super().__init__(members, run_dirs, run_dir, whole)
        m0 = members[0]
        self.check_common_step()
        self.view = view = MembersView([m.agent for m in members], m0.member_networks)
        coef = lambda key: np.array([float(getattr(m.cfg.algo, key)) for m in members])  # noqa: E731
        rates = coef("learning_rate")
        self.per_member_rate = len(set(rates)) > 1
        self.optimizers: Dict[str, tuple] = {}  # name -> (stacked optimizer, pairs)
        for name, params in m0.optimizer_groups(view).items():
            pairs = view.pairs(params)
            opt = stacked_optimizer(pairs, rates, 1e-8)  # the members' Adam: eps 1e-8
            load_stacked_state(opt, [m.optimizers[name] for m in members], pairs, self.per_member_rate)
            self.optimizers[name] = (opt, pairs)
        acting = self.optimizers[m0.acting_group][1]
        self.update_cells = m0.update_steps(view, {name: opt for name, (opt, _) in self.optimizers.items()},
                                            {"gamma": per_member(coef("gamma")), "tau": per_member(coef("tau"))},
                                            WriteBack(acting))
        self.act_cell = MembersAct([m.act_cell for m in members])
        written = {id(s) for s, _ in acting}
        self.host_pairs = [(s, ps) for s, ps in view.pairs() if id(s) not in written]
        """The stacked Parameters the members' own copies are synced from on the host."""
        self.rounds = Rounds(members, self, stacked=True, owner=self)
        for k, m in enumerate(members):  # a checkpoint of a member holds its current state
            m.before_state = (lambda k=k: self.sync_member(k))

    # -- the members' own copies ------------------------------------------------------------------
    def sync_member(self, k: int) -> None:
        """Member k's critics, targets (and temperature) and optimizer state <- its slices of the
        stacked ones (its acting Parameters are written by every gradient step)."""
        for stacked, params in self.host_pairs:
            params[k].copy_(Tensor(stacked.asnumpy()[k]))
        m = self.members[k]
        for name, (opt, pairs) in self.optimizers.items():
            store_member_state(opt, m.optimizers[name], pairs, k, self.per_member_rate)

    def before_finish(self) -> None:
        self.sync_parameters()

    def sync_parameters(self) -> None:
        """Every member's Parameters <- the stacked ones (what logs' finite check and hashes read)."""
        for stacked, params in self.host_pairs:
            values = stacked.asnumpy()
            for k, p in enumerate(params):
                p.copy_(Tensor(values[k]))

    # -- training ---------------------------------------------------------------------------------
    def _loop(self, runs: List[RunContext], signals) -> None:
        self.signals = signals
        self.rounds.loop(runs)

    def log_point(self, runs: List[RunContext], pending: List[List[Dict[str, float]]]) -> None:
        """Every member's logs, evaluation and checkpoint; a requested stop checkpoints them all."""
        self.sync_parameters()
        for run, p in zip(runs, pending):
            run.after_iteration(mean_stats(p))
        if self.stop_requested is not None:
            self.interrupt(runs, self.stop_requested)
        self.signals.reinstall()  # MindSpore replaced the SIGINT handler during the graph calls
