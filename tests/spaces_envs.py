"""Small environments for the space tests (registered on import; no ROMs, no downloads).

* ``MsrlTestMultiDiscrete-v0``: observation Box(3) holding a target (t0, t1, t2), each target scaled
  to [-1, 1]; action MultiDiscrete([3, 4, 2]); reward = the number of dimensions equal to the target,
  episodes of 8 steps (a fresh target each step). Optimum 3 per step, 24 per episode; random 8.67.
* ``MsrlTestMultiBinary-v0``: observation Box(4) of +-1 signs; action MultiBinary(4); reward = the
  number of bits equal to (obs > 0); 8 steps. Optimum 32, random 16.
* ``MsrlTestDict-v0``: observation Dict(goal=Discrete(3), sign=Box(1) of +-1, pos=Box(2, 3) of noise);
  action Discrete(6); reward 1 when action == goal + 3 * (sign > 0), so the policy must read two
  keys of different kinds; 8 steps. Optimum 8, random 1.33.
* ``MsrlTestDot-v0``: a 32x32 RGB uint8 frame (HWC) showing a red 8x8 dot (the agent) and a green
  one (the target) on a 4x4 grid; action Discrete(4) (up, down, left, right); reward +1 on reaching
  the target (the episode ends) and 0.1 per grid step closer (-0.1 per step away); 24-step limit.
  Optimal play returns 1 + 0.1 * (initial distance); random play rarely reaches the target.
* ``MsrlTestDot40-v0``: the same game on a 40x40 frame (10x10 cells): the smallest frame NatureCNN (SB3's
  CnnPolicy, msrl's ``policy.cnn: nature``) takes, for the imported-CnnPolicy tests.
* ``MsrlTestAtariFrame-v0``: the same game drawn on a full-size Atari frame (210x160x3 uint8, 4x4
  cells of 52x40 pixels): a stand-in for an ALE env with the shapes of the real camera input.
"""
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class _EightSteps(gym.Env):
    """Episodes of 8 steps, a fresh observation (``_new``) at every step, the reward of the action
    against the current one (``_reward``)."""

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._new(), {}

    def step(self, action):
        r = self._reward(action)
        self.t += 1
        return self._new(), r, self.t >= 8, False, {}


class MultiDiscreteTarget(_EightSteps):
    NVEC = (3, 4, 2)
    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = spaces.MultiDiscrete(NVEC)

    def _new(self):
        self.target = np.array([self.np_random.integers(0, n) for n in self.NVEC])
        return (2.0 * self.target / (np.array(self.NVEC) - 1) - 1.0).astype(np.float32)

    def _reward(self, action):
        return float((np.asarray(action) == self.target).sum())


class MultiBinaryMatch(_EightSteps):
    observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = spaces.MultiBinary(4)

    def _new(self):
        self.bits = self.np_random.integers(0, 2, 4)
        return (2.0 * self.bits - 1.0).astype(np.float32)

    def _reward(self, action):
        return float((np.asarray(action) == self.bits).sum())


class DictGoal(_EightSteps):
    observation_space = spaces.Dict({"sign": spaces.Box(-1.0, 1.0, (1,), np.float32),
                                     "goal": spaces.Discrete(3),
                                     "pos": spaces.Box(-1.0, 1.0, (2, 3), np.float32)})
    action_space = spaces.Discrete(6)

    def _new(self):
        self.goal = int(self.np_random.integers(0, 3))
        self.sign = int(self.np_random.integers(0, 2))
        return {"sign": np.array([2.0 * self.sign - 1.0], np.float32), "goal": self.goal,
                "pos": self.np_random.uniform(-1, 1, (2, 3)).astype(np.float32)}

    def _reward(self, action):
        return float(int(action) == self.goal + 3 * self.sign)


class DotToTarget(gym.Env):
    observation_space = spaces.Box(0, 255, (32, 32, 3), np.uint8)
    action_space = spaces.Discrete(4)
    MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))
    CELL = (8, 8)  # pixels per grid cell (rows, columns)

    def _frame(self):
        img = np.zeros(self.observation_space.shape, np.uint8)
        (ar, ac), (tr, tc), (h, w) = self.agent, self.target, self.CELL
        img[h * tr:h * tr + h, w * tc:w * tc + w, 1] = 255
        img[h * ar:h * ar + h, w * ac:w * ac + w, 0] = 255
        return img

    def _dist(self):
        return abs(self.agent[0] - self.target[0]) + abs(self.agent[1] - self.target[1])

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.target = tuple(int(v) for v in self.np_random.integers(0, 4, 2))
        self.agent = self.target
        while self.agent == self.target:
            self.agent = tuple(int(v) for v in self.np_random.integers(0, 4, 2))
        return self._frame(), {}

    def step(self, action):
        before = self._dist()
        dr, dc = self.MOVES[int(action)]
        self.agent = (min(max(self.agent[0] + dr, 0), 3), min(max(self.agent[1] + dc, 0), 3))
        reached = self.agent == self.target
        r = 0.1 * (before - self._dist()) + (1.0 if reached else 0.0)
        return self._frame(), r, reached, False, {}


class DotOn40Frame(DotToTarget):
    observation_space = spaces.Box(0, 255, (40, 40, 3), np.uint8)
    CELL = (10, 10)


class DotOnAtariFrame(DotToTarget):
    observation_space = spaces.Box(0, 255, (210, 160, 3), np.uint8)
    CELL = (52, 40)


if "MsrlTestDot-v0" not in gym.registry:
    gym.register("MsrlTestDot-v0", entry_point=DotToTarget, max_episode_steps=24)
if "MsrlTestDot40-v0" not in gym.registry:
    gym.register("MsrlTestDot40-v0", entry_point=DotOn40Frame, max_episode_steps=24)
if "MsrlTestAtariFrame-v0" not in gym.registry:
    gym.register("MsrlTestAtariFrame-v0", entry_point=DotOnAtariFrame, max_episode_steps=24)

for _id, _cls in (("MsrlTestMultiDiscrete-v0", MultiDiscreteTarget), ("MsrlTestMultiBinary-v0", MultiBinaryMatch),
                  ("MsrlTestDict-v0", DictGoal)):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_cls)
