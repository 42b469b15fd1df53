"""The exact success probability of a FrozenLake policy, from the env's own transition table.

A FrozenLake observation is one of 16 states, so the deterministic policy is a table: this asks
the policy (a run directory: the training cell; an export directory: the exported artifact) for
the action of every state, then computes P(reach the goal within the time limit) by dynamic
programming over ``env.unwrapped.P``, and the same for the best stationary policy (value
iteration, gamma -> 1) and the best time-dependent one. No sampling error, unlike a mean over
evaluation episodes (100 episodes at p = 0.74 have a standard error of 0.044).

    python benchmarks/frozenlake_exact.py RUN_OR_EXPORT_DIR [--backend train|mindspore|onnxruntime]
"""
from __future__ import annotations

import argparse
import json

import numpy as np


def success_probability(P, n_states: int, table: np.ndarray, horizon: int) -> float:
    """P(reward 1 within ``horizon`` steps from state 0) of the stationary policy ``table``."""
    v = np.zeros(n_states)
    for _ in range(horizon):
        nv = np.zeros(n_states)
        for s in range(n_states):
            for p, s2, r, done in P[s][int(table[s])]:
                nv[s] += p * (r + (0.0 if done else v[s2]))
        v = nv
    return float(v[0])


def optimum(P, n_states: int, n_actions: int, horizon: int):
    """(best time-dependent success probability, best stationary table) over ``horizon`` steps."""
    def q_of(v, gamma):
        q = np.zeros((n_states, n_actions))
        for s in range(n_states):
            for a in range(n_actions):
                for p, s2, r, done in P[s][a]:
                    q[s, a] += p * (r + (0.0 if done else gamma * v[s2]))
        return q
    v = np.zeros(n_states)
    for _ in range(horizon):
        v = q_of(v, 1.0).max(1)
    best_time_dependent = float(v[0])
    v = np.zeros(n_states)
    for _ in range(3000):
        v = q_of(v, 0.999).max(1)
    return best_time_dependent, q_of(v, 0.999).argmax(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", help="a run directory or an export directory")
    ap.add_argument("--backend", default=None)
    a = ap.parse_args()
    from msrl_consistent.envs import make_env
    from msrl_consistent.runtime import load_policy

    policy = load_policy(a.path, backend=a.backend)
    env = make_env(policy.env_config())
    P, n_s, n_a = env.unwrapped.P, env.observation_space.n, env.action_space.n
    horizon = env.spec.max_episode_steps or 100
    table = np.asarray(policy.act(np.arange(n_s)))
    best_td, best_table = optimum(P, n_s, n_a, horizon)
    print(json.dumps({"path": a.path, "backend": policy.backend, "horizon": horizon, "policy": table.tolist(),
                      "success_probability": round(success_probability(P, n_s, table, horizon), 4),
                      "best_stationary": round(success_probability(P, n_s, best_table, horizon), 4),
                      "best_time_dependent": round(best_td, 4)}))


if __name__ == "__main__":
    main()
