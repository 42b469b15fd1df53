"""A PPO population: K members (seeds of one config) trained in one process, with one acting
graph call per vector step and one update-phase graph call per rollout for all K.

Each member is an ordinary PPO run: its own config (its seed), run directory, environments,
Generator stream, normalization statistics, optimizer state, logs, evaluations and
checkpoints, so ``msrl eval / export / verify / plot / train --resume`` use a member as any run.
What the members share is the graph calls (members.py): the members' own rollout
cells side by side (a member acts exactly as its exported policy cell computes), and an update
phase over stacked copies of their Parameters (BatchMatMul), whose rounding differs from one
member trained alone in the last bits; docs/populations.md says how much.

The population directory (``population.json``, the members' directories, ``summary.json``)
is msrl_consistent/populations.py's.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import mindspore as ms
import numpy as np
from mindspore import Tensor

from msrl_consistent.config import ConfigError
from msrl_consistent.fastcall import FastCall
from msrl_consistent.populations import SWEEPABLE
from msrl_consistent.populations.base import Population
from msrl_consistent.populations.stacked_optim import load_stacked_state, stacked_optimizer, store_member_state
from msrl_consistent.run_context import RunContext

from ..algorithm import schedule_value
from ..on_policy import PackedRollout, Rollouts
from .members import MembersAgent, PopulationRollout, PopulationValue, supported_distribution
from .update import PPOTrainStep, PPOUpdatePhase, explained_variance, minibatch_indices, phase_stats


class PPOPopulation(Population):
    """K PPO members trained together (see the module docstring)."""

    sweepable = SWEEPABLE
    """The keys ``--sweep`` takes (msrl_consistent.populations.SWEEPABLE)."""

    @staticmethod
    def refusal(cfg, spec=None) -> Optional[str]:
        """Why the stacked graphs cannot train this config's members (None: they can); such a
        population trains its members one after another (msrl_consistent.populations.base.SequentialPopulation).
        ``spec``: the env's SpaceSpec where the caller has it (else made from the config)."""
        from msrl_consistent.envs import env_spec
        c, pc, ec = cfg.algo, cfg.policy, cfg.env
        refused = [("algo.target_kl", c.target_kl is not None), ("algo.use_sde", c.use_sde),
                   ("policy.shared", pc.shared), ("env.frame_stack", ec.frame_stack > 1),
                   ("policy.recurrent", pc.recurrent)]
        for key, bad in refused:
            if bad:
                return f"key '{key}' is set"
        spec = spec or env_spec(ec)
        if spec.obs_kind == "Image" or spec.image_parts:
            return f"{ec.id} has {'Dict observations with images' if spec.obs_kind == 'Dict' else 'image observations'}"
        if spec.act_kind in ("MultiDiscrete", "MultiBinary"):
            return f"{ec.id} has {spec.act_kind} actions"
        return None

    def __init__(self, members: List, run_dirs: List[str], run_dir: str, whole: bool = True):
        super().__init__(members, run_dirs, run_dir, whole)
        m0 = members[0]
        self.spec, self.c = m0.spec, m0.cfg.algo
        reason = self.refusal(m0.cfg, m0.spec)
        if reason is not None or not supported_distribution(m0.distribution):
            raise ConfigError(f"{run_dir}: the stacked population cannot train these members "
                              f"({reason or type(m0.distribution).__name__ + ' actions'}); see populations.population_class")
        self.check_common_step()
        agents = [m.agent for m in members]
        self.stacked = MembersAgent(agents)
        self.pairs = self.stacked.pairs(agents)
        coef = lambda key: np.array([float(getattr(m.cfg.algo, key)) for m in members])  # noqa: E731
        self.per_member_rate = len(set(coef("learning_rate"))) > 1
        self.optimizer = stacked_optimizer(self.pairs, coef("learning_rate"), self.c.adam_eps)
        load_stacked_state(self.optimizer, [m.optimizer for m in members], self.pairs, self.per_member_rate)
        n = m0.cfg.env.n_envs  # GAE's gamma and lambda per buffer column (member k: columns k*n..)
        self.gammas, self.lambdas = np.repeat(coef("gamma"), n), np.repeat(coef("gae_lambda"), n)
        loss = m0.make_loss(self.stacked, {"ent_coef": coef("ent_coef"), "vf_coef": coef("vf_coef")})
        step = PPOTrainStep(loss, self.optimizer, coef("max_grad_norm"), early_stop=False, members=self.k)
        self.rollout = self.c.n_steps * m0.cfg.env.n_envs
        self.phase = PPOUpdatePhase(step, self.c.n_epochs, self.rollout, self.c.batch_size, self.pairs)
        self._phase_fn = FastCall(self.phase)
        self._rollout_fn = FastCall(PackedRollout(PopulationRollout(agents, self.stacked)))
        self._value_fn = FastCall(PopulationValue(agents, self.stacked))
        for k, m in enumerate(members):  # a checkpoint of a member holds its optimizer's current state
            m.before_state = (lambda k=k, m=m: store_member_state(self.optimizer, m.optimizer, self.pairs, k,
                                                                  self.per_member_rate))

    # -- training ---------------------------------------------------------------------------------
    def _loop(self, runs: List[RunContext], signals) -> None:
        self.signals = signals
        Rollouts(self.members, stacked=True, owner=self).loop(runs)

    def values_of(self, obs: np.ndarray) -> np.ndarray:
        """V(s) of (K * n) rows, member k's critic on its n rows: (K * n,)."""
        return self._value_fn(Tensor(obs.reshape(self.k, -1, obs.shape[-1]))).asnumpy().reshape(-1)

    def gae(self):
        """GAE's gamma and lambda per buffer column (each member's own)."""
        return self.gammas, self.lambdas

    def train_members(self, buf) -> List[Dict[str, float]]:
        return self.train(buf)

    def after_update(self, runs: List[RunContext]) -> None:
        if self.stop_requested is not None:
            self.interrupt(runs, self.stop_requested)
        self.signals.reinstall()  # MindSpore replaced the SIGINT handler during the graph calls

    def train(self, buf) -> List[Dict[str, float]]:
        """One update phase of every member (one graph call); returns each member's stats."""
        c, members, k = self.c, self.members, self.k
        m0 = members[0]
        remaining = max(1.0 - m0.num_timesteps / m0.cfg.total_timesteps, 0.0)
        rates = np.array([schedule_value(m.cfg.algo.learning_rate, c.lr_schedule, remaining) for m in members],
                         np.float32)
        lr = Tensor(rates) if self.per_member_rate else Tensor(float(rates[0]), ms.float32)
        clips = np.array([[schedule_value(m.cfg.algo.clip_range, m.cfg.algo.clip_range_schedule, remaining)]
                          for m in members], np.float32)
        clip_vf = np.array([[m.cfg.algo.clip_range_vf or 0.0] for m in members], np.float32)
        n = self.rollout
        # member-major rows: member k's rows k * n .. (k + 1) * n in the order its own buffer's flat() has
        data = {key: np.ascontiguousarray(np.swapaxes(v.reshape((c.n_steps, k, -1) + v.shape[2:]), 0, 1)).reshape(
            (k * n,) + v.shape[2:]) for key, v in (("obs", buf.obs), ("actions", buf.actions),
                                                   ("log_probs", buf.log_probs), ("values", buf.values),
                                                   ("advantages", buf.advantages), ("returns", buf.returns))}
        fulls, tails = [], []
        for i, m in enumerate(members):  # each member's permutations from its own Generator
            full, tail = minibatch_indices(m.rng, n, c.batch_size, c.n_epochs)
            fulls.append(full + i * n)
            tails.append(tail + i * n)
        self.stacked.set_stats([m.agent for m in members])
        stats, _ = self._phase_fn(Tensor(np.concatenate(fulls, 1)), Tensor(np.concatenate(tails, 1)), lr,
                                  Tensor(clips), Tensor(clip_vf), Tensor(np.inf, ms.float32),
                                  *(Tensor(data[key]) for key in ("obs", "actions", "log_probs", "advantages",
                                                                  "returns", "values")))
        stats = stats.asnumpy()
        out = []
        for i, m in enumerate(members):
            res = phase_stats(stats[:, i, :])
            res["explained_variance"] = explained_variance(data["returns"][i * n:(i + 1) * n],
                                                           data["values"][i * n:(i + 1) * n])
            res["learning_rate"] = float(rates[i])
            res["clip_range"] = float(clips[i, 0])
            res["epochs"] = c.n_epochs
            if not self.spec.discrete:
                res["std"] = float(np.exp(m.agent.log_std.asnumpy()).mean())
            m.n_updates += self.phase.total
            out.append(res)
        return out
