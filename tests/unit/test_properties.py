"""Property tests: any YAML document or --set string gives a valid config or a ConfigError
(exit 2 through the CLI), never another exception; random arrays given to `act` either act or
raise ValueError, never crash."""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msrl_consistent.config import ConfigError, load_config

KEYS = ["algorithm", "seed", "total_timesteps", "device", "env", "policy", "algo", "eval", "checkpoint", "log",
        "id", "n_envs", "normalize_obs", "net_arch", "activation", "learning_rate", "n_steps", "gamma", "freq",
        "episodes", "keep", "batch_size", "clip_range_vf", "target_kl", "bogus"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["1e5", "3e-4", "ppo", "sac", "td3", "tanh", "CPU", "nan", "-inf", "[1, 2]"]))
documents = st.recursive(scalars, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(st.sampled_from(KEYS), children, max_size=5)), max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_random_documents_valid_or_config_error(doc):
    try:
        cfg = load_config(None, data=doc if isinstance(doc, dict) else {"algorithm": doc})
    except ConfigError as exc:
        assert str(exc)
    else:
        assert cfg.total_timesteps > 0 and cfg.env.n_envs > 0


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_yaml_bytes(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("y") / "c.yaml"
    path.write_bytes(raw)
    try:
        load_config(str(path))
    except ConfigError as exc:
        assert str(path) in str(exc) or "key" in str(exc)


override_keys = st.sampled_from(["seed", "algo.learning_rate", "env.n_envs", "policy.net_arch", "algo.gamma",
                                 "env", "algo", "algo.n_steps.x", "", "..", "a..b", "eval.freq", "nope.key",
                                 "policy.activation", "algo.target_kl", "algorithm"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(override_keys, st.text(max_size=10)), max_size=4), st.booleans())
def test_random_set_strings(configs_dir, pairs, with_equals):
    overrides = [f"{k}={v}" if with_equals else f"{k}{v}" for k, v in pairs]
    try:
        load_config(os.path.join(configs_dir, "ppo", "CartPole-v1.yaml"), overrides)
    except ConfigError as exc:
        assert str(exc)


@pytest.fixture(scope="module")
def exported_policy(cartpole_run, tmp_path_factory):
    from msrl_consistent.export.exporter import export_run
    from msrl_consistent.runtime import load_policy
    out = str(tmp_path_factory.mktemp("prop") / "e")
    export_run(cartpole_run, out, formats=["mindir", "onnx"], golden=32)
    return load_policy(out, backend="mindspore"), load_policy(out, backend="onnxruntime")


arrays = st.one_of(
    st.builds(lambda shape, dtype, fill: np.full(shape, fill).astype(dtype),
              st.lists(st.integers(0, 5), max_size=3).map(tuple),
              st.sampled_from([np.float32, np.float64, np.float16, np.int32, np.int64, np.bool_, np.complex64]),
              st.floats(allow_nan=True, allow_infinity=True, width=16)),
    st.lists(st.floats(-1e3, 1e3), min_size=0, max_size=6),
    st.text(max_size=5), st.none())


@settings(max_examples=200, deadline=None)
@given(arrays)
def test_random_inputs_to_act(exported_policy, x):
    for policy in exported_policy:
        try:
            out = policy.act(x)
        except ValueError as exc:
            assert "expected" in str(exc)
        else:
            arr = np.asarray(x)
            assert arr.shape[-1] == 4 and np.all(np.isfinite(arr))
            assert np.all((out == 0) | (out == 1))
