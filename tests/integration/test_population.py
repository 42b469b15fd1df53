"""Populations: several PPO seeds trained in one process, each member an ordinary run."""
import json
import os
import shutil
import signal
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from helpers import CONFIGS, interrupt_when, member_hashes, msrl
from mindspore import Tensor

from msrl_consistent import registry
from msrl_consistent.config import load_config
from msrl_consistent.envs import flat_obs
from msrl_consistent.export.exporter import export_run
from msrl_consistent.export.verify import verify_export
from msrl_consistent.populations import member_dir, resume_population, train_population

SMALL = {"CartPole-v1": ["total_timesteps=512", "env.n_envs=4", "algo.n_steps=32", "algo.batch_size=64",
                         "algo.n_epochs=2", "eval.freq=0", "eval.episodes=2"],
         "Pendulum-v1": ["total_timesteps=768", "env.n_envs=2", "algo.n_steps=64", "algo.batch_size=48",
                         "algo.n_epochs=2", "eval.freq=0", "eval.episodes=1"],
         # Discrete observations (one-hot inside the cell), an entropy bonus (the loss through autodiff)
         "FrozenLake-v1": ["total_timesteps=512", "env.n_envs=4", "algo.n_steps=32", "algo.batch_size=64",
                           "algo.n_epochs=2", "eval.freq=0", "eval.episodes=2"],
         # a Dict of Box and Discrete keys (the Dict encoder inside the cell), CartPole's recipe otherwise
         "MsrlTestDict-v0": ["env.id=MsrlTestDict-v0", "total_timesteps=512", "env.n_envs=4", "algo.n_steps=32",
                             "algo.batch_size=64", "algo.n_epochs=2", "eval.freq=0", "eval.episodes=2"]}


def _config(env_id, extra=()):
    import spaces_envs  # noqa: F401  (registers the test envs)

    name = "CartPole-v1" if env_id.startswith("MsrlTest") else env_id
    return load_config(os.path.join(CONFIGS, "ppo", f"{name}.yaml"), SMALL[env_id] + list(extra))


def _observations(env_id, k, n, obs_dim, rng):
    """(k, n, obs_dim) policy rows: a Box's scaled normal draws, other spaces' own samples."""
    if env_id in ("CartPole-v1", "Pendulum-v1"):
        return (rng.standard_normal((k, n, obs_dim)) * 2.0).astype(np.float32)
    space = gym.make(env_id).observation_space
    space.seed(int(rng.integers(1 << 31)))
    return np.stack([np.concatenate([flat_obs(space.sample(), 1) for _ in range(n)]) for _ in range(k)])


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "FrozenLake-v1", "MsrlTestDict-v0"])
def test_member_acts_on_the_numbers_its_exported_cell_computes(tmp_path, env_id, lite_runtime):
    """After training, the population's acting graph (zero noise: the distribution's mode) gives each
    member exactly its own policy cell's actions and its MindIR export verifies bit for bit."""
    cfg = _config(env_id)
    run_dir = str(tmp_path / "pop")
    seeds = [3, 5, 7]
    summary = train_population(cfg, seeds, run_dir)
    assert sorted(summary["members"]) == [f"seed{s}" for s in seeds]
    population = resume_population(run_dir)  # the members as checkpointed, in one population again
    members = population.members
    rng = np.random.default_rng(0)
    n = 64
    obs = _observations(env_id, len(seeds), n, members[0].spec.obs_dim, rng)
    noise = np.zeros((len(seeds), n) + members[0].distribution.noise(rng, 1).shape[1:], np.float32)
    rows = population._rollout_fn(Tensor(obs), Tensor(noise)).asnumpy().reshape(len(seeds), n, -1)  # member after member
    width = int(np.prod(members[0].spec.action_shape, dtype=np.int64))
    for k, m in enumerate(members):
        own = m.act_deterministic(obs[k]).reshape(n, -1)
        np.testing.assert_array_equal(rows[k, :, :width], own.astype(np.float32))
    # distinct members: their parameters differ
    assert len(set(member_hashes(run_dir, seeds).values())) == len(seeds)
    out = str(tmp_path / "export")
    export_run(member_dir(run_dir, seeds[1]), out, formats=["mindir", "lite"], golden=128)
    report = verify_export(out, backend="mindspore", episodes=2)
    assert report["passed"] and report["golden"]["bit_identical"]
    assert report["rollouts"]["identical_episodes"] == 2
    lite = verify_export(out, backend="lite", episodes=1)  # the member on MindSpore Lite, converted from its ONNX
    assert lite["passed"], lite["criteria"]


@pytest.mark.slow
def test_population_is_reproducible_and_resumes_exactly(tmp_path):
    cfg = _config("CartPole-v1", ["checkpoint.freq=128"])
    seeds = [0, 1]
    first = str(tmp_path / "a")
    train_population(cfg, seeds, first)
    second = str(tmp_path / "b")
    train_population(cfg, seeds, second)
    assert member_hashes(first, seeds) == member_hashes(second, seeds)

    # an interruption after the first update: every member checkpoints that step; two resumes of
    # those checkpoints end bit-identical (the envs are reseeded from (seed, steps done), as a
    # single run's resume reseeds them)
    third = str(tmp_path / "c")
    cls = registry.get("ppo").population
    from msrl_consistent.run_context import TrainingInterrupted
    original = cls.__init__

    def stop_at_once(self, *a, **k):
        original(self, *a, **k)
        self.stop_requested = 15

    cls.__init__ = stop_at_once
    try:
        with pytest.raises(TrainingInterrupted):
            train_population(cfg, seeds, third)
    finally:
        cls.__init__ = original
    for s in seeds:
        ckpts = os.listdir(os.path.join(member_dir(third, s), "checkpoints"))
        assert ckpts == ["step-000000128.safetensors"], ckpts
    fourth = str(tmp_path / "c2")
    shutil.copytree(third, fourth)
    resume_population(third).learn()
    resume_population(fourth).learn()
    assert member_hashes(third, seeds) == member_hashes(fourth, seeds)
    with open(os.path.join(member_dir(third, 0), "metrics.jsonl")) as fh:
        events = [json.loads(line).get("event") for line in fh]
    assert events.count("interrupted") == 1 and events.count("resumed") == 1 and events.count("finished") == 1

    # a member whose newest checkpoint is another step than the others': refused, naming both
    broken = str(tmp_path / "d")
    shutil.copytree(first, broken)
    os.unlink(os.path.join(broken, "summary.json"))
    os.unlink(os.path.join(member_dir(broken, 1), "checkpoints", "final.safetensors"))
    from msrl_consistent.checkpoint import CheckpointError
    with pytest.raises(CheckpointError, match="different steps"):
        resume_population(broken)


@pytest.mark.slow
def test_population_command_line(tmp_path):
    run_dir = tmp_path / "pop"
    sets = sum((["--set", s] for s in SMALL["CartPole-v1"] if not s.startswith("total_timesteps")), [])
    r = msrl("train", "ppo/CartPole-v1", "--seeds", "0-1", "--total-timesteps", "256", "--run-dir", run_dir, *sets)
    assert r.returncode == 0, r.stderr
    assert "seed0: eval mean return" in r.stdout and "seed1: eval mean return" in r.stdout
    for s in (0, 1):
        with open(os.path.join(member_dir(str(run_dir), s), "config.yaml")) as fh:
            assert f"seed: {s}" in fh.read()
    r = msrl("eval", member_dir(str(run_dir), 1), "--episodes", "1")
    assert r.returncode == 0, r.stderr
    r = msrl("train", "--resume", run_dir)
    assert r.returncode == 0 and "already finished" in r.stdout, r.stdout + r.stderr
    for cmd in (["eval", run_dir], ["export", run_dir, "--out", tmp_path / "x"]):
        r = msrl(*cmd)
        assert r.returncode == 2 and "is a population directory; pass one of its members" in r.stderr, r.stderr
    pytest.importorskip("matplotlib")
    from msrl_consistent.plot import plot_runs
    groups = plot_runs([str(run_dir)], str(tmp_path / "curves.png"))
    assert len(groups) == 1 and len(groups[0].curves) == 2  # the population is one band of its seeds


@pytest.mark.slow
def test_sweep_trains_one_member_per_setting(tmp_path):
    """--sweep: a grid of per-member hyperparameters; each member runs with its own values (the
    learning rate through the per-member-rate Adam)."""
    run_dir = tmp_path / "sweep"
    sets = sum((["--set", s] for s in SMALL["CartPole-v1"] if not s.startswith("total_timesteps")), [])
    r = msrl("train", "ppo/CartPole-v1", "--seeds", "4", "--sweep", "algo.learning_rate=1e-3,3e-4", "--sweep",
             "clip_range=0.001,0.3", "--total-timesteps", "256", "--run-dir", run_dir, "--quiet", *sets)
    assert r.returncode == 0, r.stderr
    with open(run_dir / "population.json") as fh:
        info = json.load(fh)
    names = [m["run_dir"] for m in info["members"]]
    assert names == ["learning_rate=0.001-clip_range=0.001-seed4", "learning_rate=0.001-clip_range=0.3-seed4",
                     "learning_rate=0.0003-clip_range=0.001-seed4", "learning_rate=0.0003-clip_range=0.3-seed4"]
    hashes = set()
    for m in info["members"]:
        cfg = load_config(str(run_dir / m["run_dir"] / "config.yaml"))
        assert (cfg.seed, cfg.algo.learning_rate, cfg.algo.clip_range) == (4, m["algo.learning_rate"],
                                                                          m["algo.clip_range"])
        with open(run_dir / m["run_dir"] / "metrics.jsonl") as fh:
            train = [json.loads(line) for line in fh if '"kind": "train"' in line]
        # the linear schedules of the member's own values, at the first update (remaining 1 - 128/256)
        assert train[0]["learning_rate"] == pytest.approx(cfg.algo.learning_rate * 0.5)
        assert train[0]["clip_range"] == pytest.approx(cfg.algo.clip_range * 0.5)
        with open(run_dir / m["run_dir"] / "summary.json") as fh:
            hashes.add(json.load(fh)["params_sha256"])
    assert len(hashes) == 4
    assert len(resume_population(str(run_dir)).members) == 4  # the members (one seed, four settings) stack again


@pytest.mark.parametrize("args, message", [
    (["ppo/CartPole-v1", "--seeds", "0-x"], "--seeds 0-x: expected seeds as 0-4 or 0,1,2"),
    (["ppo/CartPole-v1", "--seeds", "1,1"], "expected distinct seeds"),
    (["ppo/CartPole-v1", "--seeds", "0-1", "--workers", "2"], "a population is not data-parallel"),
    (["ppo/CartPole-v1", "--seeds", "0-1", "--seed", "3"], "--seeds and --seed"),
    (["sac/Pendulum-v1", "--seeds", "0", "--sweep", "clip_range=0.1,0.2"], "member clip_range=0.1-seed0:|clip_range"),
    (["ppo/CartPole-v1", "--seeds", "0", "--sweep", "algo.n_steps=16,0"], "member n_steps=0-seed0:|algo.n_steps"),
    (["ppo/CartPole-v1", "--seeds", "0", "--sweep", "learning_rate=-1,1e-3"],
     "member learning_rate=-1-seed0:|key 'algo.learning_rate' has value -1"),
    (["ppo/CartPole-v1", "--sweep", "learning_rate=1e-3,3e-4"], "--sweep needs --seeds"),
    (["ppo/CartPole-v1", "--jobs", "2"], "--jobs 2 needs --seeds"),
    (["ppo/CartPole-v1", "--seeds", "0-1", "--jobs", "3"], "--jobs 3: the population has 2 member(s); expected at most 2"),
    (["ppo/CartPole-v1", "--seeds", "0-1", "--jobs", "0"], "--jobs 0: expected a positive number"),
])
def test_population_refusals_name_the_problem(tmp_path, args, message):
    run_dir = tmp_path / "pop"
    r = msrl("train", *args, "--run-dir", run_dir)
    assert r.returncode == 2, r.stdout + r.stderr
    assert all(part in r.stderr for part in message.split("|")) and "Traceback" not in r.stderr, r.stderr
    assert not run_dir.exists()


ONE_THREAD_POPULATION = """
import sys
import mindspore as ms
ms.set_context(runtime_num_threads=1)
from msrl_consistent.config import load_config
from msrl_consistent.populations import train_population
cfg = load_config(sys.argv[1], sys.argv[4:])
train_population(cfg, [int(s) for s in sys.argv[2].split(",")], sys.argv[3])
"""


@pytest.mark.slow
def test_jobs_trains_groups_in_processes_interrupts_and_resumes(tmp_path):
    """--jobs 2: the members in two processes (groups [0, 1] and [2]), the first group's members
    bit-identical to a population of just them trained with one kernel thread; SIGTERM to the command stops both
    groups at a checkpoint (exit 143), and two resumes of that state end bit-identical."""
    sets = [s for s in SMALL["CartPole-v1"] if not s.startswith("total_timesteps")]
    flags = sum((["--set", s] for s in sets), [])
    run_dir = tmp_path / "jobs"
    r = msrl("train", "ppo/CartPole-v1", "--seeds", "0-2", "--jobs", "2", "--total-timesteps", "512",
             "--run-dir", run_dir, *flags)
    assert r.returncode == 0, r.stderr
    assert "3 members in 2 processes" in r.stdout and "seed2: eval mean return" in r.stdout, r.stdout
    summary = json.load(open(run_dir / "summary.json"))
    assert summary["groups"] == [[0, 1], [2]] and sorted(summary["members"]) == ["seed0", "seed1", "seed2"]
    cfg_path = os.path.join(CONFIGS, "ppo", "CartPole-v1.yaml")
    alone = str(tmp_path / "alone")
    subprocess.run([sys.executable, "-c", ONE_THREAD_POPULATION, cfg_path, "0,1", alone, "total_timesteps=512",
                    *sets], check=True, env=dict(os.environ, GLOG_v="3"))
    assert member_hashes(alone, [0, 1]) == member_hashes(str(run_dir), [0, 1])
    with pytest.raises(Exception, match="trained in 2 processes"):
        resume_population(str(run_dir))

    stopped = tmp_path / "stopped"
    cmd = [sys.executable, "-m", "msrl_consistent", "train", "ppo/CartPole-v1", "--seeds", "0-2", "--jobs", "2",
           "--total-timesteps", "4000", "--run-dir", str(stopped), "--quiet", *flags]
    proc = subprocess.Popen(cmd, env=dict(os.environ, GLOG_v="3"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    metrics = [stopped / f"seed{s}" / "metrics.jsonl" for s in range(3)]
    _, err = interrupt_when(proc, lambda: all(m.exists() and m.read_text().count("\n") >= 3 for m in metrics),
                            signal.SIGTERM)
    assert proc.returncode == 143, err[-2000:]
    assert f"msrl train --resume {stopped}" in err, err
    steps = {}
    for s in range(3):
        events = [json.loads(line) for line in open(metrics[s]) if '"event"' in line]
        if s == 2 and events[-1]["event"] == "finished":  # the one-member group may finish first on a busy machine
            continue
        assert events[-1]["event"] == "interrupted", events
        step = int(os.path.basename(events[-1]["checkpoint"]).split("-")[1].split(".")[0])
        if s == 2 and step >= 4000:  # ... or reach its last step and be stopped while finishing
            continue
        steps[s] = step
    assert steps[0] == steps[1] and 0 < min(steps.values()) and max(steps.values()) < 4000, steps
    assert not (stopped / "summary.json").exists()
    copy = tmp_path / "copy"
    shutil.copytree(stopped, copy)
    for d in (stopped, copy):
        r = msrl("train", "--resume", d, "--quiet")
        assert r.returncode == 0, r.stderr
    assert member_hashes(str(stopped), [0, 1, 2]) == member_hashes(str(copy), [0, 1, 2])
    r = msrl("train", "--resume", stopped)
    assert r.returncode == 0 and "already finished" in r.stdout, r.stdout + r.stderr
