"""env.pipeline's env groups: the same envs, seeds, columns and step results as one vector env,
the groups' steps in a worker thread with the overlap, and the one-env refusal."""
import threading

import gymnasium as gym
import numpy as np
import pytest

from msrl_consistent.config import ConfigError, EnvConfig
from msrl_consistent.envs import env_spec, make_vec_env, seed_vec_env, step_transitions
from msrl_consistent.pipeline import EnvGroups, group_ranges

STEPPED_IN = []


class ThreadEnv(gym.Wrapper):
    """CartPole recording the thread each step runs in."""

    def step(self, action):
        STEPPED_IN.append(threading.current_thread().name)
        return self.env.step(action)


gym.register("ThreadCartPole-v0", entry_point=lambda **kw: ThreadEnv(gym.make("CartPole-v1", **kw)))


def test_group_ranges():
    assert group_ranges(8, "sequential") == [range(8)]
    assert group_ranges(8, "overlap") == [range(4), range(4, 8)]
    assert group_ranges(5, "overlap") == [range(3), range(3, 5)]  # the first group takes the odd env


@pytest.mark.parametrize("members,n", [(1, 4), (2, 3)])
def test_groups_are_one_vector_env_split_by_columns(members, n):
    cfg = EnvConfig(id="CartPole-v1", n_envs=n, pipeline="overlap")
    whole = make_vec_env(cfg, members * n)
    groups = EnvGroups(cfg, members)
    try:
        assert groups.overlap and sorted(np.concatenate(groups.cols).tolist()) == list(range(members * n))
        seeds = [7, 100][:members]
        np.testing.assert_array_equal(groups.reset(seeds), seed_vec_env(whole, seeds))
        rng = np.random.default_rng(0)
        for _ in range(60):  # past several episode ends (autoreset, the true final observations)
            actions = rng.integers(0, 2, members * n)
            expect = step_transitions(whole, actions)
            for g, cols in enumerate(groups.cols):
                groups.send(g, actions[cols])
            got = [groups.join(list(p)) for p in zip(*[groups.recv(g) for g in range(groups.groups)])]
            for e, o in zip(expect, got):
                np.testing.assert_array_equal(e, o)
    finally:
        whole.close()
        groups.close()


@pytest.mark.parametrize("pipeline,worker", [("sequential", False), ("overlap", True)])
def test_overlap_steps_the_envs_in_a_worker_thread(pipeline, worker):
    groups = EnvGroups(EnvConfig(id="ThreadCartPole-v0", n_envs=2, pipeline=pipeline))
    try:
        groups.reset([0])
        STEPPED_IN.clear()
        for g, cols in enumerate(groups.cols):
            groups.send(g, np.zeros(len(cols), np.int64))
        for g in range(groups.groups):
            groups.recv(g)
        assert len(STEPPED_IN) == 2
        assert all(name.startswith("msrl-envs") == worker for name in STEPPED_IN)
    finally:
        groups.close()


def test_overlap_with_one_env_is_refused():
    with pytest.raises(ConfigError, match=r"env.pipeline.*'overlap'.*n_envs is 1.*n_envs >= 2"):
        env_spec(EnvConfig(id="CartPole-v1", n_envs=1, pipeline="overlap"))
