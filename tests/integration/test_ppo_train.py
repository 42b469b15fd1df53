"""PPO training through the public API and the CLI: determinism, run directory, checkpoints."""
import json
import os

import numpy as np
import pytest
from helpers import train_run

from msrl_consistent import checkpoint as ckpt
from msrl_consistent.cli import main
from msrl_consistent.runtime import load_policy

SHORT = ["total_timesteps=2048", "eval.freq=0", "eval.episodes=1", "env.n_envs=4", "algo.n_steps=64",
         "algo.batch_size=128", "algo.n_epochs=4"]


@pytest.mark.slow
def test_same_seed_bit_identical_other_seed_differs(tmp_path):
    _, s1, _ = train_run(tmp_path, "ppo/CartPole-v1.yaml", SHORT + ["seed=3"], "a")
    _, s2, _ = train_run(tmp_path, "ppo/CartPole-v1.yaml", SHORT + ["seed=3"], "b")
    _, s3, _ = train_run(tmp_path, "ppo/CartPole-v1.yaml", SHORT + ["seed=4"], "c")
    assert s1["num_timesteps"] == 2048
    assert s1["params_sha256"] == s2["params_sha256"]
    assert s1["params_sha256"] != s3["params_sha256"]


@pytest.mark.slow
def test_continuous_with_normalization_deterministic(tmp_path):
    args = ["total_timesteps=1024", "algo.n_steps=128", "eval.freq=0", "eval.episodes=1", "seed=1"]
    _, s1, a1 = train_run(tmp_path, "ppo/Pendulum-v1.yaml", args, "a")
    _, s2, a2 = train_run(tmp_path, "ppo/Pendulum-v1.yaml", args, "b")
    assert s1["params_sha256"] == s2["params_sha256"]
    # the normalization statistics are parameters of the cell, and they moved
    mean = a1.agent.normalizer.mean.asnumpy()
    assert np.abs(mean).max() > 0
    np.testing.assert_array_equal(mean, a1.obs_rms.mean.astype(np.float32))


@pytest.mark.slow
def test_shared_trunk_and_value_clipping_and_target_kl(tmp_path):
    _, s, algo = train_run(tmp_path, "ppo/CartPole-v1.yaml",
                           SHORT + ["policy.shared=true", "algo.clip_range_vf=0.2", "algo.target_kl=0.0001"], "x")
    assert s["num_timesteps"] == 2048
    names = list(dict(algo.agent.parameters_and_names()))
    assert sum("layers.0.weight" in n for n in names) == 1  # one trunk, not two
    rows = [json.loads(line) for line in open(os.path.join(tmp_path, "x", "metrics.jsonl"))]
    train_rows = [r for r in rows if r["kind"] == "train"]
    # a tiny target_kl stops the epochs early
    assert any(r["epochs"] < 4 for r in train_rows)


def test_checkpoint_roundtrip_identical_actions(tmp_path, cartpole_run):
    policy = load_policy(cartpole_run, backend="train")
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 4)).astype(np.float32)
    a1 = policy.act(obs)
    tensors, meta = ckpt.load_checkpoint(os.path.join(cartpole_run, "checkpoints", "final.safetensors"))
    assert meta["algorithm"] == "ppo" and "numpy_rng" in meta and meta["counters"]["num_timesteps"] >= 4096
    assert any(k.startswith("optim/adam/moment1") for k in tensors)
    assert "rng/mindspore" in tensors
    # write a copy and load from it: same actions
    copy = tmp_path / "copy.safetensors"
    ckpt.save_checkpoint(str(copy), tensors, meta)
    policy2 = load_policy(cartpole_run, backend="train", checkpoint=str(copy))
    np.testing.assert_array_equal(a1, policy2.act(obs))


def test_corrupt_checkpoint_named(tmp_path, cartpole_run):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(open(os.path.join(cartpole_run, "checkpoints", "final.safetensors"), "rb").read()[:100])
    with pytest.raises(ckpt.CheckpointError, match="bad.safetensors is truncated or corrupt"):
        ckpt.load_checkpoint(str(bad))


@pytest.mark.slow
def test_cli_train_and_eval(tmp_path, configs_dir, capsys):
    run = tmp_path / "run"
    rc = main(["train", os.path.join(configs_dir, "ppo", "CartPole-v1.yaml"), "--seed", "2", "--total-timesteps", "1e3",
               "--run-dir", str(run), "--set", "eval.freq=0", "--set", "eval.episodes=1", "--quiet"])
    assert rc == 0
    for p in ["config.yaml", "metrics.jsonl", "summary.json", "checkpoints/final.safetensors", "tb"]:
        assert (run / p).exists(), p
    rows = [json.loads(line) for line in open(run / "metrics.jsonl")]
    train_keys = set().union(*(r.keys() for r in rows if r["kind"] == "train"))
    for k in ["loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
              "explained_variance", "learning_rate", "steps_per_second"]:
        assert k in train_keys, k
    assert "seed: 2" in (run / "config.yaml").read_text()
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "3", "--seed", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["episodes"] == 3 and len(out["returns"]) == 3
    assert out["mean_return"] == pytest.approx(np.mean(out["returns"]))
    assert {"std_return", "latency_us"} <= set(out)
    # the same seed gives the same returns
    assert main(["eval", str(run), "--episodes", "3", "--seed", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["returns"] == out["returns"]
    # a non-empty run dir is refused, nothing overwritten
    before = (run / "checkpoints" / "final.safetensors").read_bytes()
    assert main(["train", os.path.join(configs_dir, "ppo", "CartPole-v1.yaml"), "--run-dir", str(run), "--quiet"]) == 2
    assert (run / "checkpoints" / "final.safetensors").read_bytes() == before


def test_eval_missing_checkpoint(tmp_path, capsys):
    run = tmp_path / "r"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("algorithm: ppo\n")
    assert main(["eval", str(run)]) == 2
    assert "has no checkpoint" in capsys.readouterr().err


@pytest.mark.slow
def test_async_vector_env_same_result_as_sync(tmp_path):
    args = ["total_timesteps=512", "eval.freq=0", "eval.episodes=1", "env.n_envs=2", "algo.n_steps=64",
                        "algo.batch_size=64", "algo.n_epochs=1"]
    _, s1, _ = train_run(tmp_path, "ppo/CartPole-v1.yaml", args, "sync")
    _, s2, _ = train_run(tmp_path, "ppo/CartPole-v1.yaml", args + ["env.vectorization=async"], "async")
    assert s1["params_sha256"] == s2["params_sha256"]


def test_export_of_run_without_checkpoint(tmp_path, capsys):
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.yaml").write_text("algorithm: ppo\n")
    assert main(["export", str(run), "--out", str(tmp_path / "e")]) == 2
    assert "has no checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()
