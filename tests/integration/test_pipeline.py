"""env.pipeline: overlap trains what the sequential rollout trains: the same parameters bit for bit
on every CPU (the acting graph takes every column's rows, a group's in their own columns), groups
of one row included, populations and every algorithm family, the export verified bit for bit, and
one env refused with one clear line."""
import os

import pytest
from helpers import CONFIGS, msrl, train_run

from msrl_consistent.config import load_config
from msrl_consistent.export.exporter import export_run
from msrl_consistent.export.verify import verify_export
from msrl_consistent.populations import train_population

SMALL = ["eval.freq=0", "eval.episodes=1", "log.tensorboard=false"]
CASES = {
    # 8 envs (groups of 4), a frame stack kept per group
    "ppo-frame-stack": ("ppo/CartPole-v1.yaml", ["total_timesteps=1024", "env.frame_stack=2", "algo.n_steps=32",
                                                 "algo.batch_size=64", "algo.n_epochs=2"]),
    # the recurrent state and episode starts carried per group's columns
    "ppo-lstm": ("ppo/CartPoleNoVel-v1-lstm.yaml", ["total_timesteps=512", "env.n_envs=4", "algo.n_steps=32",
                                                    "algo.batch_size=64", "algo.n_epochs=2"]),
    # off-policy: the exploration noise drawn for every row at once, sliced per group
    "td3": ("td3/Pendulum-v1.yaml", ["total_timesteps=600", "env.n_envs=4", "algo.learning_starts=200",
                                     "algo.train_freq=10", "algo.gradient_steps=10", "policy.net_arch=[32, 32]"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_overlap_trains_bit_identically(tmp_path, case):
    config, extra = CASES[case]
    _, seq, _ = train_run(tmp_path, config, SMALL + extra, "sequential")
    run, over, _ = train_run(tmp_path, config, SMALL + extra + ["env.pipeline=overlap"], "overlap")
    assert over["params_sha256"] == seq["params_sha256"]
    assert over["phase_seconds"]["env"] >= 0.0 and over["phase_seconds"]["acting"] > 0.0
    if case == "ppo-frame-stack":
        out = str(tmp_path / "export")
        export_run(run, out)
        report = verify_export(out, backend="mindspore", episodes=2)
        assert report["passed"] and report["golden"]["bit_identical"]


@pytest.mark.slow
def test_population_overlap_trains_each_member_bit_identically(tmp_path):
    cfg = load_config(os.path.join(CONFIGS, "ppo", "CartPole-v1.yaml"),
                      SMALL + ["total_timesteps=512", "env.n_envs=4", "algo.n_steps=32", "algo.batch_size=64"])
    over_cfg = load_config(os.path.join(CONFIGS, "ppo", "CartPole-v1.yaml"),
                           SMALL + ["total_timesteps=512", "env.n_envs=4", "algo.n_steps=32", "algo.batch_size=64",
                                    "env.pipeline=overlap"])
    seq = train_population(cfg, [0, 1], str(tmp_path / "seq"))
    over = train_population(over_cfg, [0, 1], str(tmp_path / "over"))
    hashes = [{m: s["params_sha256"] for m, s in r["members"].items()} for r in (seq, over)]
    assert hashes[0] == hashes[1] and len(set(hashes[0].values())) == 2


@pytest.mark.slow
def test_one_row_groups_train_what_the_sequential_rollout_trains(tmp_path):
    """2 envs: each group is one row, which a MatMul kernel rounds differently from a row of two
    (measured on AVX2 and AVX-512 hosts) if the graph ran at the group's batch; at the full batch,
    each row in its column, the run is the sequential one and the rollout/update mismatch its 0."""
    extra = SMALL + ["total_timesteps=256", "env.n_envs=2", "algo.n_steps=1", "algo.batch_size=2"]
    _, seq, _ = train_run(tmp_path, "ppo/Pendulum-v1.yaml", extra, "sequential")
    _, over, _ = train_run(tmp_path, "ppo/Pendulum-v1.yaml", extra + ["env.pipeline=overlap"], "overlap")
    assert over["params_sha256"] == seq["params_sha256"]
    assert over["mismatch"]["max"] == seq["mismatch"]["max"] == 0.0


def test_overlap_with_one_env_is_one_clear_line(tmp_path):
    run = tmp_path / "run"
    proc = msrl("train", "sac/Pendulum-v1", "--run-dir", run, "--set", "env.pipeline=overlap")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "key 'env.pipeline' is 'overlap', but env.n_envs is 1" in proc.stderr
    assert not run.exists()  # refused before the run directory is made
