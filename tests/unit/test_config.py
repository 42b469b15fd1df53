"""Config loading: typed fields, clear errors naming file/key/value, exit code 2 from the CLI."""
import os
import subprocess
import sys

import pytest

from msrl_consistent.cli import main
from msrl_consistent.config import Config, ConfigError, EnvConfig, apply_overrides, load_config
from msrl_consistent.config_docs import field_docs


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_shipped_configs_load(configs_dir):
    cfg = load_config(os.path.join(configs_dir, "ppo", "CartPole-v1.yaml"))
    # RL-Zoo's tuned CartPole values
    assert (cfg.env.n_envs, cfg.algo.n_steps, cfg.algo.batch_size, cfg.algo.n_epochs) == (8, 32, 256, 20)
    assert (cfg.algo.gae_lambda, cfg.algo.gamma, cfg.algo.ent_coef) == (0.8, 0.98, 0.0)
    assert cfg.algo.learning_rate == 1e-3 and cfg.algo.lr_schedule == "linear"
    assert cfg.algo.clip_range == 0.2 and cfg.algo.clip_range_schedule == "linear"
    assert cfg.total_timesteps == 100000
    shipped = [os.path.join(configs_dir, d, f) for d in sorted(os.listdir(configs_dir))
               if os.path.isdir(os.path.join(configs_dir, d)) for f in sorted(os.listdir(os.path.join(configs_dir, d)))
               if f.endswith(".yaml")]
    assert len(shipped) >= 7
    for path in shipped:
        load_config(path)


def test_unknown_key_names_key_file_and_closest(tmp_path):
    path = write(tmp_path, "algorithm: ppo\nalgo:\n  learnin_rate: 0.1\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    msg = str(e.value)
    assert "algo.learnin_rate" in msg and path in msg and "algo.learning_rate" in msg


def test_unknown_top_level_key(tmp_path):
    path = write(tmp_path, "algorithm: ppo\ntotal_timestep: 10\n")
    with pytest.raises(ConfigError, match=r"unknown key 'total_timestep'; did you mean 'total_timesteps'"):
        load_config(path)


def test_wrong_type_names_key_value_and_type(tmp_path):
    path = write(tmp_path, "algorithm: ppo\nalgo:\n  n_epochs: ten\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "algo.n_epochs" in str(e.value) and "'ten'" in str(e.value) and "expected int" in str(e.value)


def test_scientific_notation_for_int_and_float(tmp_path):
    path = write(tmp_path, "algorithm: ppo\ntotal_timesteps: 1e5\nalgo:\n  learning_rate: 3e-4\n")
    cfg = load_config(path)
    assert cfg.total_timesteps == 100000 and isinstance(cfg.total_timesteps, int)
    assert cfg.algo.learning_rate == pytest.approx(3e-4)


def test_non_integral_value_for_int_rejected(tmp_path):
    with pytest.raises(ConfigError, match="total_timesteps.*1.5e3|total_timesteps.*expected int"):
        load_config(write(tmp_path, "algorithm: ppo\ntotal_timesteps: 1.5e3x\n"))
    with pytest.raises(ConfigError, match="expected int"):
        load_config(write(tmp_path, "algorithm: ppo\ntotal_timesteps: 1234.5\n"))


def test_bool_is_not_an_int(tmp_path):
    with pytest.raises(ConfigError, match="seed"):
        load_config(write(tmp_path, "algorithm: ppo\nseed: true\n"))


def test_range_checks(tmp_path):
    with pytest.raises(ConfigError, match=r"algo.gamma.*1.5.*\[0, 1\]"):
        load_config(write(tmp_path, "algorithm: ppo\nalgo: {gamma: 1.5}\n"))
    with pytest.raises(ConfigError, match=r"env.n_envs"):
        load_config(write(tmp_path, "algorithm: ppo\nenv: {n_envs: 0}\n"))


def test_literal_choice_suggests(tmp_path):
    with pytest.raises(ConfigError, match=r"activation.*'tahn'.*did you mean 'tanh'"):
        load_config(write(tmp_path, "algorithm: ppo\npolicy: {activation: tahn}\n"))


def test_unknown_algorithm(tmp_path):
    with pytest.raises(ConfigError, match=r"algorithm.*'ppp'.*did you mean 'ppo'"):
        load_config(write(tmp_path, "algorithm: ppp\n"))


def test_missing_file():
    with pytest.raises(ConfigError, match="config file not found: /nonexistent/x.yaml"):
        load_config("/nonexistent/x.yaml")


def test_malformed_yaml(tmp_path):
    path = write(tmp_path, "algorithm: ppo\nalgo: {n_steps: [1, 2\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        load_config(path)


def test_yaml_is_never_evaluated(tmp_path):
    path = write(tmp_path, "algorithm: !!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        load_config(path)


def test_document_must_be_mapping(tmp_path):
    with pytest.raises(ConfigError, match="mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_set_overrides_typed(tmp_path, configs_dir):
    cfg = load_config(os.path.join(configs_dir, "ppo", "CartPole-v1.yaml"),
                      ["algo.learning_rate=3e-4", "env.n_envs=2", "policy.net_arch=[32, 32]", "algo.target_kl=0.02"])
    assert cfg.algo.learning_rate == pytest.approx(3e-4) and cfg.env.n_envs == 2
    assert cfg.policy.net_arch == [32, 32] and cfg.algo.target_kl == pytest.approx(0.02)
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        apply_overrides({}, ["novalue"])
    with pytest.raises(ConfigError, match=r"env.n_envs.*'x'"):
        load_config(os.path.join(configs_dir, "ppo", "CartPole-v1.yaml"), ["env.n_envs=x"])


def test_every_field_documented():
    from msrl_consistent import registry
    classes = [Config, EnvConfig] + [registry.config_class(name) for name in registry.names()]
    for cls in classes:
        for name, _tp, _default, doc in field_docs(cls):
            assert doc, f"{cls.__name__}.{name} has no docstring line"


def test_cli_config_error_exit_2(tmp_path, capsys):
    path = write(tmp_path, "algorithm: ppo\nalgo: {n_stpes: 8}\n")
    rc = main(["train", path, "--run-dir", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "msrl: error:" in err and "algo.n_stpes" in err and "algo.n_steps" in err
    assert not (tmp_path / "run").exists()  # nothing written for a bad config


def test_cli_subprocess_no_traceback(tmp_path):
    path = write(tmp_path, "algorithm: ppo\nseed: [1]\n")
    proc = subprocess.run([sys.executable, "-m", "msrl_consistent", "train", path, "--quiet"],
                          capture_output=True, text=True, cwd=str(tmp_path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "key 'seed'" in proc.stderr


def test_docs_config_reference_is_current(configs_dir):
    from msrl_consistent.config_docs import reference_markdown
    path = os.path.join(os.path.dirname(configs_dir), "docs", "config.md")
    assert open(path).read() == reference_markdown(), "regenerate: python -m msrl_consistent.config_docs > docs/config.md"


def test_rlzoo_ppo_recipes_as_published(configs_dir):
    # rl-baselines3-zoo hyperparams/ppo.yml, Pendulum-v1 (gSDE) and HalfCheetah (normalize: true)
    p = load_config(os.path.join(configs_dir, "ppo", "Pendulum-v1-gsde.yaml"))
    a = p.algo
    assert (p.total_timesteps, p.env.n_envs, a.n_steps, a.gae_lambda, a.gamma, a.n_epochs) == (100000, 4, 1024, 0.95,
                                                                                                0.9, 10)
    assert (a.ent_coef, a.learning_rate, a.lr_schedule, a.clip_range, a.use_sde, a.sde_sample_freq) == (
        0.0, 1e-3, "constant", 0.2, True, 4)
    assert (a.batch_size, p.policy.net_arch, p.policy.activation, p.policy.log_std_init, p.policy.ortho_init,
            p.env.normalize_obs, p.env.normalize_reward) == (64, [64, 64], "tanh", 0.0, True, False, False)
    h = load_config(os.path.join(configs_dir, "ppo", "HalfCheetah-v5.yaml"))
    a = h.algo
    assert (h.env.id, h.total_timesteps, h.env.n_envs, a.batch_size, a.n_steps, a.gamma) == ("HalfCheetah-v5", 1000000,
                                                                                            1, 64, 512, 0.98)
    assert (a.learning_rate, a.ent_coef, a.clip_range, a.n_epochs, a.gae_lambda, a.max_grad_norm, a.vf_coef) == (
        2.0633e-05, 0.000401762, 0.1, 20, 0.92, 0.8, 0.58096)
    assert (h.env.normalize_obs, h.env.normalize_reward, h.env.normalize_obs_clip, h.env.normalize_reward_clip) == (
        True, True, 10.0, 10.0)
    pol = h.policy
    assert (pol.log_std_init, pol.ortho_init, pol.activation, pol.net_arch, pol.critic_arch, pol.shared) == (
        -2.0, False, "relu", [256, 256], [256, 256], False)
    assert a.use_sde is False and a.lr_schedule == "constant" and a.clip_range_schedule == "constant"


def test_a_config_without_policy_keys_gets_its_algorithms_sb3_network(capsys):
    # SB3: PPO [64, 64] tanh with orthogonal init; DQN [64, 64], SAC [256, 256], TD3 [400, 300], ReLU, torch's init
    want = {"ppo": ([64, 64], "tanh", True), "dqn": ([64, 64], "relu", False), "sac": ([256, 256], "relu", False),
            "td3": ([400, 300], "relu", False)}
    for algo, (arch, act, ortho) in want.items():
        p = load_config(None, [], data={"algorithm": algo}).policy
        assert (p.net_arch, p.activation, p.ortho_init) == (arch, act, ortho), algo
    p = load_config(None, ["policy.activation=tanh"], data={"algorithm": "sac"}).policy  # a key given wins
    assert (p.net_arch, p.activation) == ([256, 256], "tanh")
    from msrl_consistent.cli import main
    assert main(["configs", "--defaults", "td3"]) == 0
    assert "net_arch:\n  - 400\n  - 300\n" in capsys.readouterr().out
