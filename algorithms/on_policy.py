"""The on-policy loop (PPO): collect ``n_steps`` vector steps with one graph call each into a
RolloutBuffer, bootstrap truncated episodes and the last step with the value cell, compute
GAE, then run the algorithm's ``train`` on the rollout."""
from __future__ import annotations

import time

import numpy as np
from mindspore import Tensor, nn

from msrl_consistent.buffers import RolloutBuffer
from msrl_consistent.envs import make_vec_env, seed_vec_env, step_transitions
from msrl_consistent.fastcall import FastCall

from .algorithm import Algorithm
from .run import RunContext


class OnPolicyAlgorithm(Algorithm):
    """Rollout collection shared by on-policy methods. Subclasses set ``rollout_cell``
    ((obs, noise) -> (env_action, action, log_prob, value)) and ``value_cell`` in ``build``
    and implement ``train(buffer) -> stats``."""

    n_steps: int = 0
    gamma: float = 0.99
    gae_lambda: float = 0.95
    rollout_cell: nn.Cell
    value_cell: nn.Cell

    def sample_noise(self, n: int) -> np.ndarray:
        """Host-side noise for the rollout graph: Gumbel (discrete) or standard normal."""
        if self.spec.discrete:
            u = self.rng.random((n, self.spec.n_actions))
            return (-np.log(-np.log(np.clip(u, 1e-12, 1.0 - 1e-7)))).astype(np.float32)
        return self.rng.standard_normal((n, self.spec.n_actions)).astype(np.float32)

    def values_of(self, obs: np.ndarray) -> np.ndarray:
        return self._value_fn(Tensor(np.asarray(obs, np.float32))).asnumpy()

    def learn_loop(self, run: RunContext) -> None:
        cfg = self.cfg
        self._rollout_fn = FastCall(self.rollout_cell)
        self._value_fn = FastCall(self.value_cell)
        venv = make_vec_env(cfg.env)
        n_envs = venv.num_envs
        act_shape = () if self.spec.discrete else (self.spec.n_actions,)
        buf = RolloutBuffer(self.n_steps, n_envs, self.spec.obs_dim, act_shape, self.spec.discrete)
        steps_per_vector_step = n_envs * self.dist.world  # num_timesteps counts every rank's steps
        obs = seed_vec_env(venv, self.env_seed())
        ep_ret = np.zeros(n_envs, np.float64)
        ep_len = np.zeros(n_envs, np.int64)
        phases = run.phases
        clock = time.perf_counter
        try:
            while self.num_timesteps < cfg.total_timesteps:
                buf.reset()
                for t in range(self.n_steps):
                    t0 = clock()
                    env_a, a, logp, v = self._rollout_fn(Tensor(obs), Tensor(self.sample_noise(n_envs)))
                    env_a, a = env_a.asnumpy(), a.asnumpy()
                    t1 = clock()
                    next_obs, rew, term, trunc, real_next = step_transitions(venv, env_a)
                    t2 = clock()
                    buf.add(obs, a, logp.asnumpy(), v.asnumpy(), rew, term, trunc)
                    if np.any(trunc):
                        idx = np.nonzero(trunc & ~term)[0]
                        if idx.size:
                            # the whole batch: one graph shape (a subset would compile a graph per size)
                            buf.set_final_values(t, idx, self.values_of(real_next)[idx])
                    self.num_timesteps += steps_per_vector_step
                    ep_ret += rew
                    ep_len += 1
                    for i in np.nonzero(term | trunc)[0]:
                        run.episode_done(float(ep_ret[i]), int(ep_len[i]))
                        ep_ret[i], ep_len[i] = 0.0, 0
                    obs = next_obs
                    phases["env"] += t2 - t1
                    phases["acting"] += clock() - t2 + (t1 - t0)
                t0 = clock()
                if self.obs_rms is not None:  # every rank's rollout, merged in rank order
                    self.obs_rms.update(self.dist.allgather(buf.obs))
                buf.compute(self.values_of(obs), self.gamma, self.gae_lambda)
                stats = self.train(buf)
                if run.first_update_s is None:
                    run.first_update_s = clock() - t0
                # New statistics take effect after the update: frozen during a rollout and its update.
                self.sync_normalizer()
                self.iterations += 1
                phases["update"] += clock() - t0
                run.after_iteration(stats)
        finally:
            venv.close()
