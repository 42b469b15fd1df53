"""Populations of configs the stacked graphs do not train (images, gSDE, target_kl, a recurrent
policy, SAC/TD3 with observation normalization): the members train one after another, each
exactly its single run, in the same population directories."""
import json
import os
import shutil

import pytest
from helpers import CONFIGS, member_hashes, msrl

from msrl_consistent.config import load_config
from msrl_consistent.populations import member_dir, resume_population, train_population
from msrl_consistent.run_context import RunContext, TrainingInterrupted

SMALL = ["total_timesteps=512", "env.n_envs=4", "algo.n_steps=32", "algo.batch_size=64", "algo.n_epochs=2",
         "eval.episodes=2"]


def _summary(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as fh:
        return json.load(fh)


@pytest.mark.slow
def test_image_population_members_are_their_single_runs(tmp_path):
    sets = [a for kv in SMALL for a in ("--set", kv)]
    pop = tmp_path / "pop"
    r = msrl("train", "ppo/MultiSensorReach-v0", "--seeds", "0-1", *sets, "--run-dir", pop)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "one after another because MultiSensorReach-v0 has Dict observations with images" in r.stdout, r.stdout
    with open(pop / "population.json") as fh:
        assert json.load(fh)["training"].startswith("one after another (MultiSensorReach-v0 has")
    single = tmp_path / "single"
    r = msrl("train", "ppo/MultiSensorReach-v0", "--seed", "1", *sets, "--run-dir", single, "--quiet")
    assert r.returncode == 0, r.stderr
    # the second member, trained after the first in the same process, is the single run bit for bit
    assert member_hashes(pop, [1])[1] == _summary(single)["params_sha256"]
    assert set(_summary(pop)["members"]) == {"seed0", "seed1"}
    r = msrl("train", "--resume", pop)
    assert r.returncode == 0 and "already finished" in r.stdout, r.stdout + r.stderr
    r = msrl("eval", member_dir(str(pop), 0), "--episodes", "2")
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_interrupted_member_resumes_and_the_rest_train_after_it(tmp_path, monkeypatch):
    cfg = load_config(os.path.join(CONFIGS, "ppo", "Pendulum-v1-gsde.yaml"),
                      ["total_timesteps=512", "env.n_envs=2", "algo.n_steps=64", "algo.batch_size=64",
                       "algo.n_epochs=2", "eval.freq=0", "eval.episodes=1", "checkpoint.freq=128"])
    seeds = [0, 1]
    whole = str(tmp_path / "whole")
    train_population(cfg, seeds, whole)

    original = RunContext.after_iteration

    def stop_member_0(self, stats):  # a SIGTERM while seed 0 trains its second rollout
        if self.cfg.seed == 0 and self.algo.num_timesteps == 256:
            self.algo.request_stop(15)
        return original(self, stats)

    monkeypatch.setattr(RunContext, "after_iteration", stop_member_0)
    stopped = str(tmp_path / "stopped")
    with pytest.raises(TrainingInterrupted):
        train_population(cfg, seeds, stopped)
    monkeypatch.undo()
    assert max(os.listdir(os.path.join(member_dir(stopped, 0), "checkpoints"))) == "step-000000256.safetensors"
    assert not os.path.exists(os.path.join(member_dir(stopped, 1), "checkpoints"))  # not started
    copy = str(tmp_path / "copy")
    shutil.copytree(stopped, copy)
    for d in (stopped, copy):
        population = resume_population(d)
        assert population.describe() == "members one after another, 0 of 2 finished"
        population.learn()
    assert member_hashes(stopped, seeds) == member_hashes(copy, seeds)  # exact resume
    assert member_hashes(stopped, [1]) == member_hashes(whole, [1])  # the member that had not started
    with open(os.path.join(member_dir(stopped, 0), "metrics.jsonl")) as fh:
        events = [json.loads(line).get("event") for line in fh]
    assert events.count("interrupted") == 1 and events.count("resumed") == 1 and events.count("finished") == 1


@pytest.mark.slow
def test_sweep_of_a_shape_key_trains_members_one_after_another(tmp_path):
    sets = [a for kv in SMALL if not kv.startswith("algo.n_steps") for a in ("--set", kv)]
    pop = tmp_path / "sweep"
    r = msrl("train", "ppo/CartPole-v1", "--seeds", "0", "--sweep", "n_steps=16,32", *sets, "--run-dir", pop)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "one after another because --sweep varies key 'algo.n_steps'" in r.stdout, r.stdout
    for n_steps in (16, 32):
        d = pop / f"n_steps={n_steps}-seed0"
        assert load_config(str(d / "config.yaml")).algo.n_steps == n_steps
        # 512 steps of 4 envs: 8 rollouts of 16 steps or 4 of 32, 2 epochs of 64-row minibatches each
        assert _summary(d)["n_updates"] == 2 * 512 // 64
    os.unlink(pop / "summary.json")  # as if stopped after its last member: the resume reads the sweep from
    r = msrl("train", "--resume", pop)  # population.json, skips the finished members and writes the summary
    assert r.returncode == 0 and "members one after another, 2 of 2 finished" in r.stdout, r.stdout + r.stderr
    assert set(_summary(pop)["members"]) == {"n_steps=16-seed0", "n_steps=32-seed0"}
