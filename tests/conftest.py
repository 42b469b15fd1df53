import os

os.environ.setdefault("GLOG_v", "3")  # MindSpore's C++ warnings off in test output

import pytest  # noqa: E402
from helpers import CONFIGS, train_run  # noqa: E402

SLOW_FIXTURES = {"bundles", "offpolicy_run", "full_export", "pend_exports", "frozenlake_export", "space_export",
                 "sensor_export", "dist_export"}
"""Fixtures that train and export for several seconds: every test using one is ``slow`` too."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    """MindSpore runs a full ``gc.collect()`` before every graph compile (mindspore/graph/api.py);
    in a test process holding the imported libraries' millions of objects each one took ~0.2 s,
    two thirds of the export fuzzer's time. The objects alive when a module starts (after a
    collection) are moved out of the collector's reach for the module (``gc.freeze``) and given
    back at its end, so a compile scans only what the module itself made."""
    import gc

    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(scope="session")
def configs_dir():
    return CONFIGS


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


@pytest.fixture(scope="session")
def board_path(tmp_path_factory):
    """PYTHONPATH of a simulated board: numpy and onnxruntime only (helpers.board runs python -S there)."""
    from helpers import board_site
    return board_site(tmp_path_factory.mktemp("board-site"))


@pytest.fixture(scope="session")
def lite_runtime():
    """The MindSpore Lite runtime `msrl lite install` put into this user's cache (the README's test
    command installs it): a Lite test fails without it, it never skips."""
    from msrl_consistent.deploy import lite
    record = lite.read_record()
    if record is None:
        pytest.fail("MindSpore Lite is not installed: run `msrl lite install` (the README's test command does)")
    return record
