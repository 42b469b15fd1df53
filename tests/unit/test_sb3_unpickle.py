"""Reading Stable-Baselines3's pickles without executing them (msrl_consistent.sb3.unpickle, archive):
the committed fixtures read as plain data, and pickles that would run code are refused before
anything of theirs runs. No torch or SB3 involved."""
import os
import pickle
import zipfile

import numpy as np
import pytest
from helpers import ROOT

from msrl_consistent.config import ConfigError
from msrl_consistent.sb3.archive import read_model, read_zoo_config
from msrl_consistent.sb3.unpickle import UnsafePickle, pickle_globals, read_torch_tensors, read_vecnormalize

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "sb3")
ZOO = os.path.join(FIXTURES, "logs", "ppo", "Pendulum-v1_1")


class RunsCode:
    """Pickles as a call of os.system: loading it would create the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_policy_pth_reads_as_the_state_dict_of_numpy_arrays():
    with zipfile.ZipFile(os.path.join(FIXTURES, "ppo_cartpole.zip")) as z:
        state = read_torch_tensors(z.read("policy.pth"), "policy.pth")
    assert state["mlp_extractor.policy_net.0.weight"].shape == (16, 4)
    assert state["mlp_extractor.value_net.0.weight"].shape == (16, 4)
    assert state["action_net.weight"].shape == (2, 16) and state["value_net.bias"].shape == (1,)
    assert all(v.dtype == np.float32 and np.isfinite(v).all() for v in state.values())
    assert np.abs(state["action_net.weight"]).max() > 0


def test_model_zip_reads_algorithm_policy_spaces_and_activation_from_plain_fields_and_opcodes():
    m = read_model(os.path.join(FIXTURES, "a2c_multidiscrete.zip"))
    assert (m.algorithm, m.family, m.policy_class) == ("a2c", "actor_critic", "ActorCriticPolicy")
    assert ("torch.nn.modules.activation", "ReLU") in m.kwarg_classes
    assert m.action_space["kind"] == "MultiDiscrete" and list(m.action_space["nvec"]) == [3, 4, 2]
    assert m.observation_space["shape"] == (3,) and list(m.observation_space["low"]) == [-1, -1, -1]
    sac = read_model(os.path.join(FIXTURES, "sac_pendulum.zip"))
    assert sac.algorithm == "sac" and sac.variables["log_ent_coef"].shape == (1,)


def test_rl_zoo_folder_finds_its_model_vecnormalize_and_config():
    m = read_model(ZOO)
    assert m.zoo_env == "Pendulum-v1" and m.algorithm == "ppo" and m.data["use_sde"] is True
    assert m.vecnormalize.endswith("vecnormalize.pkl")
    assert m.zoo_config["n_envs"] == 2 and m.zoo_config["policy"] == "MlpPolicy"
    with open(m.vecnormalize, "rb") as fh:
        state = read_vecnormalize(fh.read(), "vecnormalize.pkl")
    assert state["epsilon"] == 1e-6 and state["clip_obs"] == 5.0 and state["norm_obs"] is True
    assert state["obs_rms"]["mean"].shape == (3,) and state["obs_rms"]["count"] > 100


def test_zoo_config_python_tags_become_plain_data_and_run_nothing(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "config.yml"
    path.write_text(f"!!python/object/apply:collections.OrderedDict\n- - - env_wrapper\n"
                    f"    - !!python/object/apply:os.system ['touch {marker}']\n  - - n_envs\n    - 4\n")
    cfg = read_zoo_config(str(path))
    assert cfg["n_envs"] == 4 and cfg["env_wrapper"] == [f"touch {marker}"]
    assert not marker.exists()


def test_pickle_globals_names_what_a_pickle_would_call_without_calling_it(tmp_path):
    blob = pickle.dumps(RunsCode(tmp_path / "ran"), protocol=2)
    assert (os.system.__module__, "system") in pickle_globals(blob, "blob")
    blob4 = pickle.dumps({"f": RunsCode(tmp_path / "ran")}, protocol=4)  # STACK_GLOBAL with memoized strings
    assert (os.system.__module__, "system") in pickle_globals(blob4, "blob")
    assert not (tmp_path / "ran").exists()


def test_torch_reader_refuses_a_code_running_global(tmp_path):
    marker = tmp_path / "ran"
    import io
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"w": RunsCode(marker)}, protocol=2))
    with pytest.raises(UnsafePickle, match="system"):
        read_torch_tensors(buf.getvalue(), "policy.pth")
    assert not marker.exists()


def test_vecnormalize_reader_refuses_a_code_running_global(tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(UnsafePickle, match="system"):
        read_vecnormalize(pickle.dumps(RunsCode(marker)), "vecnormalize.pkl")
    assert not marker.exists()


def test_a_legacy_or_foreign_policy_file_is_a_config_error():
    with pytest.raises(ConfigError, match="not a torch zip archive"):
        read_torch_tensors(b"\x80\x02}q\x00.", "policy.pth")
