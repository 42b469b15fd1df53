"""SAC and TD3 short training runs: determinism, lean replay buffer, checkpoints, the CLI."""
import json
import os

import numpy as np
import pytest
from helpers import CONFIGS, copy_run_at_checkpoint, train_run

from msrl_consistent import checkpoint as ckpt
from msrl_consistent import registry
from msrl_consistent.cli import main

SHORT = ["total_timesteps=400", "algo.learning_starts=200", "eval.freq=0", "eval.episodes=1",
         "policy.net_arch=[32, 32]", "algo.batch_size=32", "log.tensorboard=false"]
TD3_EVERY_STEP = ["algo.train_freq=1", "algo.gradient_steps=1"]


@pytest.mark.slow
def test_sac_deterministic_and_lean_buffer_identical(tmp_path):
    _, s1, a1 = train_run(tmp_path, "sac/Pendulum-v1.yaml", SHORT + ["algo.save_replay_buffer=true"], "a")
    _, s2, _ = train_run(tmp_path, "sac/Pendulum-v1.yaml", SHORT, "b")
    _, s3, _ = train_run(tmp_path, "sac/Pendulum-v1.yaml", SHORT + ["seed=1"], "c")
    _, s4, _ = train_run(tmp_path, "sac/Pendulum-v1.yaml", SHORT + ["algo.memory_lean=true"], "d")
    _, s5, _ = train_run(tmp_path, "sac/Pendulum-v1.yaml", SHORT + ["algo.fuse_act=false"], "e")
    assert s1["num_timesteps"] == 400 and a1.n_updates == 200
    assert s1["params_sha256"] == s2["params_sha256"] == a1.params_hash()
    # acting inside the update's graph call (fuse_act, the default) changes nothing
    assert s5["params_sha256"] == s1["params_sha256"]
    assert s1["params_sha256"] != s3["params_sha256"]
    # the lean buffer returns the same samples, so the whole run is bit-identical
    assert s4["params_sha256"] == s1["params_sha256"]
    # checkpoint with the replay buffer: a fresh algorithm restores parameters, counters and buffer
    tensors, meta = ckpt.load_checkpoint(os.path.join(str(tmp_path), "a", "checkpoints", "final.safetensors"))
    assert any(k.startswith("replay/") for k in tensors)
    fresh = registry.get("sac")(a1.cfg)
    fresh.load_state(tensors, meta)
    assert fresh.params_hash() == s1["params_sha256"] and fresh.n_updates == 200
    x, y = a1.buffer.sample(32, np.random.default_rng(0)), fresh.buffer.sample(32, np.random.default_rng(0))
    for k in x:
        np.testing.assert_array_equal(x[k], y[k])
    obs = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_array_equal(fresh.act_deterministic(obs), a1.act_deterministic(obs))


@pytest.mark.slow
def test_td3_deterministic(tmp_path):
    _, s1, a1 = train_run(tmp_path, "td3/Pendulum-v1.yaml", SHORT + TD3_EVERY_STEP, "a")
    _, s2, _ = train_run(tmp_path, "td3/Pendulum-v1.yaml", SHORT + TD3_EVERY_STEP, "b")
    _, s3, _ = train_run(tmp_path, "td3/Pendulum-v1.yaml", SHORT + TD3_EVERY_STEP + ["seed=1"], "c")
    _, s4, _ = train_run(tmp_path, "td3/Pendulum-v1.yaml", SHORT + TD3_EVERY_STEP + ["algo.fuse_act=false"], "d")
    assert s1["num_timesteps"] == 400 and a1.n_updates == 200
    assert s1["params_sha256"] == s2["params_sha256"] == a1.params_hash()
    assert s1["params_sha256"] != s3["params_sha256"]
    assert s4["params_sha256"] == s1["params_sha256"]  # fuse_act changes nothing
    # rounds of 100 steps (100 gradient steps each, the last fused with the next action)
    rounds = ["algo.train_freq=100", "algo.gradient_steps=-1"]
    _, r1, b1 = train_run(tmp_path, "td3/Pendulum-v1.yaml", SHORT + rounds, "e")
    _, r2, _ = train_run(tmp_path, "td3/Pendulum-v1.yaml", SHORT + rounds + ["algo.fuse_act=false"], "f")
    assert b1.n_updates == 200 and r1["params_sha256"] == r2["params_sha256"] != s1["params_sha256"]
    # the checkpoint does not carry the buffer by default
    tensors, _ = ckpt.load_checkpoint(os.path.join(str(tmp_path), "a", "checkpoints", "final.safetensors"))
    assert not any(k.startswith("replay/") for k in tensors)
    # the log: training stats every log_interval steps, one eval at the end
    lines = [json.loads(line) for line in open(os.path.join(str(tmp_path), "a", "metrics.jsonl"))]
    train = [row for row in lines if row["kind"] == "train"]
    assert train and "critic_loss" in train[-1] and "actor_loss" in train[-1]


@pytest.mark.parametrize("name", ["sac", "td3"])
@pytest.mark.slow
def test_cli_train_and_eval(tmp_path, capsys, name):
    run_dir = str(tmp_path / "run")
    rc = main(["train", os.path.join(CONFIGS, name, "Pendulum-v1.yaml"), "--seed", "0", "--run-dir", run_dir,
               "--total-timesteps", "300", "--set", "algo.learning_starts=100", "--set", "policy.net_arch=[32, 32]",
               "--set", "algo.batch_size=32", "--set", "eval.freq=0", "--set", "eval.episodes=1",
               "--set", "algo.train_freq=1", "--set", "algo.gradient_steps=1", "--quiet"])
    assert rc == 0
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["algorithm"] == name and summary["num_timesteps"] == 300
    capsys.readouterr()
    rc = main(["eval", run_dir, "--episodes", "2", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["episodes"] == 2 and np.isfinite(out["mean_return"])


def test_discrete_env_rejected_by_cli(tmp_path, capsys):
    rc = main(["train", os.path.join(CONFIGS, "sac", "Pendulum-v1.yaml"), "--run-dir", str(tmp_path / "r"),
               "--set", "env.id=CartPole-v1", "--quiet"])
    assert rc == 2
    assert "Discrete(2)" in capsys.readouterr().err


@pytest.mark.parametrize("lean", [False, True])
@pytest.mark.slow
def test_sac_fused_acting_two_resumes_from_a_checkpoint_are_identical(tmp_path, lean):
    # fuse_act computes the next exploration action in the round's last update call, before the
    # checkpoint: resuming from the same checkpoint twice still gives the same parameters (the
    # envs are reseeded from (seed, steps), the replay buffer is saved, lean or not)
    run, _, _ = train_run(tmp_path, "sac/Pendulum-v1.yaml",
                          SHORT + ["checkpoint.freq=300", "checkpoint.keep=5", "algo.save_replay_buffer=true",
                                   f"algo.memory_lean={str(lean).lower()}", "algo.fuse_act=true"], "base")
    hashes = []
    for name in ("r1", "r2"):
        d = copy_run_at_checkpoint(run, tmp_path / name, "step-000000300.safetensors")
        algo = registry.get("sac").resume(d)
        assert algo.num_timesteps == 300 and algo.buffer is not None and algo.buffer.size == 300
        hashes.append(algo.learn(d, progress=False)["params_sha256"])
    assert hashes[0] == hashes[1]
