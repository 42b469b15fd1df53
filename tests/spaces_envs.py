"""Small environments for the space tests (registered on import; no ROMs, no downloads).

* ``MsrlTestMultiDiscrete-v0``: observation Box(3) holding a target (t0, t1, t2), each target scaled
  to [-1, 1]; action MultiDiscrete([3, 4, 2]); reward = the number of dimensions equal to the target,
  episodes of 8 steps (a fresh target each step). Optimum 3 per step, 24 per episode; random 8.67.
* ``MsrlTestMultiBinary-v0``: observation Box(4) of +-1 signs; action MultiBinary(4); reward = the
  number of bits equal to (obs > 0); 8 steps. Optimum 32, random 16.
* ``MsrlTestDict-v0``: observation Dict(goal=Discrete(3), sign=Box(1) of +-1, pos=Box(2, 3) of noise);
  action Discrete(6); reward 1 when action == goal + 3 * (sign > 0), so the policy must read two
  keys of different kinds; 8 steps. Optimum 8, random 1.33.
"""
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class MultiDiscreteTarget(gym.Env):
    NVEC = (3, 4, 2)
    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = spaces.MultiDiscrete(NVEC)

    def _new_target(self):
        self.target = np.array([self.np_random.integers(0, n) for n in self.NVEC])
        return (2.0 * self.target / (np.array(self.NVEC) - 1) - 1.0).astype(np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._new_target(), {}

    def step(self, action):
        r = float((np.asarray(action) == self.target).sum())
        self.t += 1
        return self._new_target(), r, self.t >= 8, False, {}


class MultiBinaryMatch(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = spaces.MultiBinary(4)

    def _new(self):
        self.bits = self.np_random.integers(0, 2, 4)
        return (2.0 * self.bits - 1.0).astype(np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._new(), {}

    def step(self, action):
        r = float((np.asarray(action) == self.bits).sum())
        self.t += 1
        return self._new(), r, self.t >= 8, False, {}


class DictGoal(gym.Env):
    observation_space = spaces.Dict({"sign": spaces.Box(-1.0, 1.0, (1,), np.float32),
                                     "goal": spaces.Discrete(3),
                                     "pos": spaces.Box(-1.0, 1.0, (2, 3), np.float32)})
    action_space = spaces.Discrete(6)

    def _new(self):
        self.goal = int(self.np_random.integers(0, 3))
        self.sign = int(self.np_random.integers(0, 2))
        return {"sign": np.array([2.0 * self.sign - 1.0], np.float32), "goal": self.goal,
                "pos": self.np_random.uniform(-1, 1, (2, 3)).astype(np.float32)}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._new(), {}

    def step(self, action):
        r = float(int(action) == self.goal + 3 * self.sign)
        self.t += 1
        return self._new(), r, self.t >= 8, False, {}


for _id, _cls in (("MsrlTestMultiDiscrete-v0", MultiDiscreteTarget), ("MsrlTestMultiBinary-v0", MultiBinaryMatch),
                  ("MsrlTestDict-v0", DictGoal)):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_cls)
