"""Observation and action spaces beyond Box/Discrete: the space checks, the encoders inside the
policy cell and the input validation of deploy.Policy (no training here: tests/integration/test_spaces.py)."""
import numpy as np
import pytest
from gymnasium import spaces
from mindspore import Tensor

from msrl_consistent.config import ConfigError, load_config
from msrl_consistent.deploy import Policy
from msrl_consistent.envs import SpaceSpec, space_spec
from msrl_consistent.networks import OneHot, require_box


def test_discrete_observation_spec_round_trips():
    spec = space_spec(spaces.Discrete(16), spaces.Discrete(4), "FrozenLake-v1")
    assert (spec.obs_kind, spec.obs_n, spec.obs_shape, spec.obs_dim) == ("Discrete", 16, (1,), 1)
    j = spec.to_json()
    assert j["observation"]["type"] == "Discrete" and j["observation"]["n"] == 16
    back = SpaceSpec.from_json(j)
    assert (back.obs_kind, back.obs_n, back.obs_dim, back.act_kind, back.n_actions) == ("Discrete", 16, 1, "Discrete", 4)
    # golden-set observations of a Discrete space are indices
    obs = spec.sample_obs(np.random.default_rng(0), spec.obs_low, spec.obs_high, 500)
    assert obs.shape == (500, 1) and obs.dtype == np.float32
    assert set(np.unique(obs)) == set(range(16))


def test_discrete_observation_with_start_refused():
    with pytest.raises(ConfigError, match="Discrete observation space with start=3"):
        space_spec(spaces.Discrete(5, start=3), spaces.Discrete(2), "X-v0")


def test_onehot_cell_is_exact():
    idx = np.array([[0], [3], [15], [7]], np.float32)
    out = OneHot(16)(Tensor(idx)).asnumpy()
    assert out.dtype == np.float32 and np.array_equal(out, np.eye(16, dtype=np.float32)[idx[:, 0].astype(int)])


def test_normalize_obs_refused_for_discrete_observations(configs_dir):
    import os

    from msrl_consistent.registry import build_agent
    cfg = load_config(os.path.join(configs_dir, "ppo", "FrozenLake-v1.yaml"), ["env.normalize_obs=true"])
    spec = space_spec(spaces.Discrete(16), spaces.Discrete(4))
    with pytest.raises(ConfigError, match="env.normalize_obs.*Discrete"):
        build_agent(cfg, spec, np.random.default_rng(0))


def test_offpolicy_needs_box_observations():
    spec = space_spec(spaces.Discrete(16), spaces.Box(-1, 1, (2,)))
    with pytest.raises(ConfigError, match="sac needs Box observations.*Discrete"):
        require_box(spec, "sac")


class _Echo(Policy):
    """A deploy.Policy whose 'model' returns the observation index as the action."""

    def _run(self, x):
        return x[:, 0].astype(np.int32)


def test_discrete_observation_validation_names_the_space():
    p = _Echo(1, None, True, 16, obs_n=16)
    assert p.act(5) == 5 and np.ndim(p.act(5)) == 0
    assert p.act(np.int64(15)) == 15
    assert p.act(np.array([0, 3, 7])).tolist() == [0, 3, 7]
    assert p.act(np.array([[2], [4]], np.float32)).tolist() == [2, 4]
    for bad, what in ((16, "got 16"), (-1, "got -1"), (2.5, "got 2.5"), (np.nan, "got nan"),
                      (np.zeros((2, 2)), "shape"), ("a", "dtype")):
        with pytest.raises(ValueError, match=r"Discrete\(16\) observations.*" + what):
            p.act(bad)
