"""A task that needs several sensors, registered with gymnasium when msrl is imported.

``MultiSensorReach-v0``: an agent on a 4x4 grid must reach a target within 8 steps. A camera
(``camera``: a 16x16 RGB uint8 frame, each cell 4x4 pixels) shows where the target is, but not
the agent; a position sensor (``position``: Box(2) in [0, 1], the agent's row and column / 3)
says where the agent is, but not the target. Actions: Discrete(4) (up, down, left, right);
reward +1 on reaching the target (the episode ends) and 0.1 per grid step closer (-0.1 per step
away). Optimal play returns 1 + 0.1 x the initial distance (1.27 on average); it needs both
sensors.

``MultiSensorReachCamera-v0`` and ``MultiSensorReachPosition-v0`` are the same task seen through
one sensor (the camera frame or the position alone): a policy that acts on one observation can
then reach the target only by luck (the camera alone: the same frame at every step) or by
sweeping the grid (the position alone), which 8 steps do not allow.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

GRID, CELL, STEPS = 4, 4, 8
MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))
CAMERA = spaces.Box(0, 255, (GRID * CELL, GRID * CELL, 3), np.uint8)
POSITION = spaces.Box(0.0, 1.0, (2,), np.float32)


class MultiSensorReach(gym.Env):
    """The task; ``sensors`` 'both' (Dict camera + position), 'camera' or 'position'."""

    def __init__(self, sensors: str = "both"):
        if sensors not in ("both", "camera", "position"):
            raise ValueError(f"sensors must be 'both', 'camera' or 'position', got {sensors!r}")
        self.sensors = sensors
        self.observation_space = {"both": spaces.Dict({"camera": CAMERA, "position": POSITION}),
                                  "camera": CAMERA, "position": POSITION}[sensors]
        self.action_space = spaces.Discrete(4)

    def _obs(self):
        frame = np.zeros(CAMERA.shape, np.uint8)
        (tr, tc) = self.target
        frame[CELL * tr:CELL * tr + CELL, CELL * tc:CELL * tc + CELL, 1] = 255
        position = np.asarray(self.agent, np.float32) / (GRID - 1)
        return {"both": {"camera": frame, "position": position}, "camera": frame, "position": position}[self.sensors]

    def _dist(self) -> int:
        return abs(self.agent[0] - self.target[0]) + abs(self.agent[1] - self.target[1])

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.target = tuple(int(v) for v in self.np_random.integers(0, GRID, 2))
        self.agent = self.target
        while self.agent == self.target:
            self.agent = tuple(int(v) for v in self.np_random.integers(0, GRID, 2))
        return self._obs(), {}

    def step(self, action):
        before = self._dist()
        dr, dc = MOVES[int(action)]
        self.agent = (min(max(self.agent[0] + dr, 0), GRID - 1), min(max(self.agent[1] + dc, 0), GRID - 1))
        reached = self.agent == self.target
        reward = 0.1 * (before - self._dist()) + (1.0 if reached else 0.0)
        return self._obs(), float(reward), reached, False, {}


IDS = {"MultiSensorReach-v0": "both", "MultiSensorReachCamera-v0": "camera", "MultiSensorReachPosition-v0": "position"}


def register() -> None:
    """Register the three ids (once; a later call is a no-op), each with an 8-step limit."""
    for env_id, sensors in IDS.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=MultiSensorReach, kwargs={"sensors": sensors}, max_episode_steps=STEPS)


register()
