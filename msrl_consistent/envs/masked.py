"""Partially observed classic-control tasks, registered with gymnasium when msrl is imported:
``CartPoleNoVel-v1`` and ``PendulumNoVel-v1``, RL Zoo's tasks for recurrent policies.

The velocities are zeroed in the observation (RL Zoo's MaskVelocityWrapper: the shape and
bounds stay those of the full task), so a policy sees positions only and has to infer the
velocities from what it saw before: a memory test. The dynamics, rewards and time limits are
the underlying task's.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

MASKED = {
    # id: (the full task, the indices of its velocity entries)
    "CartPoleNoVel-v1": ("CartPole-v1", (1, 3)),   # cart velocity, pole angular velocity
    "PendulumNoVel-v1": ("Pendulum-v1", (2,)),     # angular velocity
}


class MaskVelocity(gym.ObservationWrapper):
    """Multiplies each observation by a 0/1 mask that is 0 at the velocity entries."""

    def __init__(self, env: gym.Env, velocity_indices):
        super().__init__(env)
        self.mask = np.ones(env.observation_space.shape, np.float32)
        self.mask[list(velocity_indices)] = 0.0

    def observation(self, observation):
        return (observation * self.mask).astype(self.observation_space.dtype)


def _make(base: str, velocity_indices, **kwargs):
    return MaskVelocity(gym.make(base, **kwargs), velocity_indices)


def register() -> None:
    """Register the masked tasks (once; a later call is a no-op). Their episode limits are the
    full task's (the inner ``gym.make`` applies it; ``max_episode_steps`` overrides it)."""
    for env_id, (base, idx) in MASKED.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=_make, kwargs={"base": base, "velocity_indices": idx})


register()
