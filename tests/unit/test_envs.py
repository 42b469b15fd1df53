"""Spaces, seeding and gymnasium autoreset handling."""
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from msrl_consistent.config import ConfigError, EnvConfig
from msrl_consistent.envs import make_vec_env, seed_vec_env, space_spec, step_transitions


class CountEnv(gym.Env):
    """obs = [episode id, t]; terminates at t == 3 for even episodes, truncates at t == 2 via TimeLimit."""

    observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self):
        self.episode = -1
        self.t = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return np.array([self.episode, 0], np.float32), {}

    def step(self, action):
        self.t += 1
        term = self.t >= 3
        return np.array([self.episode, self.t], np.float32), 1.0, term, False, {}


gym.register("MsrlTestCount-v0", entry_point=CountEnv, max_episode_steps=5)
gym.register("MsrlTestCountShort-v0", entry_point=CountEnv, max_episode_steps=2)


def test_unsupported_spaces_named():
    with pytest.raises(ConfigError, match="unsupported action space Tuple"):
        space_spec(spaces.Box(-1, 1, (3,)), spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))), "X-v0")
    with pytest.raises(ConfigError, match="unsupported MultiDiscrete action space"):
        space_spec(spaces.Box(-1, 1, (3,)), spaces.MultiDiscrete([[2, 2], [3, 3]]), "X-v0")
    with pytest.raises(ConfigError, match="unsupported observation space Text"):
        space_spec(spaces.Text(5), spaces.Discrete(2), "X-v0")
    with pytest.raises(ConfigError, match="unsupported observation space Tuple"):
        space_spec(spaces.Tuple((spaces.Discrete(32), spaces.Discrete(11))), spaces.Discrete(2), "Blackjack-v1")


def test_unknown_env_id():
    with pytest.raises(ConfigError, match="env.id.*NoSuchEnv-v9"):
        make_vec_env(EnvConfig(id="NoSuchEnv-v9"))


@pytest.mark.parametrize("env_id,term_expected", [("MsrlTestCount-v0", True), ("MsrlTestCountShort-v0", False)])
def test_transitions_never_span_episodes(env_id, term_expected):
    venv = make_vec_env(EnvConfig(id=env_id, n_envs=2))
    obs = seed_vec_env(venv, 0)
    for _ in range(7):
        nxt, r, term, trunc, real_next, games = step_transitions(venv, np.zeros(2, np.int64))
        assert np.isnan(games).all()  # no game monitor: its episodes are the games
        for i in range(2):
            # a transition's next observation belongs to the same episode as its observation
            assert real_next[i][0] == obs[i][0]
            assert real_next[i][1] == obs[i][1] + 1
            if term[i] or trunc[i]:
                assert bool(term[i]) == term_expected and bool(trunc[i]) != term_expected
                assert nxt[i][1] == 0 and nxt[i][0] == obs[i][0] + 1  # the next step starts a new episode
        obs = nxt
    venv.close()


def test_seeding_reproducible():
    a = make_vec_env(EnvConfig(id="CartPole-v1", n_envs=3))
    b = make_vec_env(EnvConfig(id="CartPole-v1", n_envs=3))
    np.testing.assert_array_equal(seed_vec_env(a, 7), seed_vec_env(b, 7))
    assert not np.array_equal(seed_vec_env(a, 7), seed_vec_env(b, 8))
