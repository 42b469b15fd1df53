import os

os.environ.setdefault("GLOG_v", "3")  # MindSpore's C++ warnings off in test output

import pytest  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: learning tests that need minutes (run with -m slow)")


@pytest.fixture(scope="session")
def configs_dir():
    return CONFIGS


def train_run(tmp_root, config, overrides, name):
    """Train through the public API into tmp_root/name; returns (run_dir, summary)."""
    import msrl_consistent.algorithms as algorithms
    from msrl_consistent.checkpoint import atomic_write_text
    from msrl_consistent.config import dump_config, load_config

    cfg = load_config(os.path.join(CONFIGS, config), overrides)
    run_dir = os.path.join(str(tmp_root), name)
    os.makedirs(run_dir, exist_ok=True)
    atomic_write_text(os.path.join(run_dir, "config.yaml"), dump_config(cfg))
    algo = algorithms.get_algorithm(cfg.algorithm)(cfg)
    summary = algo.learn(run_dir, progress=False)
    return run_dir, summary, algo


@pytest.fixture(scope="session")
def cartpole_run(tmp_path_factory):
    """A short PPO CartPole run shared by export/verify tests."""
    root = tmp_path_factory.mktemp("runs")
    run_dir, summary, _ = train_run(root, "ppo/CartPole-v1.yaml",
                                    ["total_timesteps=4096", "eval.freq=0", "eval.episodes=2"], "cartpole")
    return run_dir


@pytest.fixture(scope="session")
def pendulum_run(tmp_path_factory):
    """A short continuous PPO run (Pendulum, observation normalization on) shared by tests."""
    root = tmp_path_factory.mktemp("runs")
    run_dir, summary, _ = train_run(root, "ppo/Pendulum-v1.yaml",
                                    ["total_timesteps=2048", "algo.n_steps=256", "eval.freq=0", "eval.episodes=1"],
                                    "pendulum")
    return run_dir
