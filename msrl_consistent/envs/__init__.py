"""Environments: from a config to gymnasium envs the policy cell can act in, and what is recorded of them.

| module | what it holds |
| --- | --- |
| ``make`` | ``env.id`` (registered, ``module:EnvId``, ``module.path:callable``), kwargs, the user's wrappers, msrl's own |
| ``check`` | the start-up check of an environment (``msrl check-env``) |
| ``recipe`` | what a run records of its environment, and which wrappers are host preprocessing |
| ``spaces`` | the supported spaces as a SpaceSpec, observations as the cell's rows |
| ``vector`` | the training vector envs: SAME_STEP autoreset, seeding, transitions |
| ``atari`` | Atari as RL Zoo runs it (the ``env.atari`` section) |
| ``masked``, ``sensors`` | the example tasks msrl registers: CartPoleNoVel-v1, PendulumNoVel-v1, MultiSensorReach-v0 |

The names below are imported on first use, so ``msrl_consistent.config`` can import
``envs.atari`` without the rest.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "make_env": "make", "env_spec": "make", "MaxAndSkipEnv": "make", "EnvError": "make", "provide": "make",
    "check_env": "check", "EnvCheckError": "check",
    "space_spec": "spaces", "flat_obs": "spaces",
    "make_vec_env": "vector", "seed_vec_env": "vector", "step_transitions": "vector",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
