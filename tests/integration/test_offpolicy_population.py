"""Off-policy populations (SAC, TD3): several seeds (or settings) trained in one process, each member an
ordinary run that explores with exactly the numbers its exported policy cell computes."""
import json
import os
import shutil

import numpy as np
import pytest
from helpers import CONFIGS, member_hashes, msrl
from mindspore import Tensor

from msrl_consistent import checkpoint as ckpt
from msrl_consistent import registry
from msrl_consistent.algorithms.off_policy_loop import Rounds
from msrl_consistent.config import load_config
from msrl_consistent.export.exporter import export_run
from msrl_consistent.export.verify import verify_export
from msrl_consistent.networks.agents import named_parameters
from msrl_consistent.populations import member_dir, resume_population, train_population
from msrl_consistent.run_context import TrainingInterrupted

SMALL = {"sac": ["total_timesteps=400", "algo.learning_starts=100", "algo.batch_size=32", "policy.net_arch=[32,32]",
                 "algo.log_interval=100", "eval.freq=0", "eval.episodes=1"],
         "td3": ["total_timesteps=400", "algo.learning_starts=100", "algo.train_freq=50", "algo.gradient_steps=50",
                 "algo.batch_size=32", "policy.net_arch=[32,32]", "algo.log_interval=100", "eval.freq=0",
                 "eval.episodes=1"],
         "dqn": ["total_timesteps=400", "algo.learning_starts=100", "algo.train_freq=50", "algo.gradient_steps=20",
                 "algo.batch_size=32", "policy.net_arch=[32,32]", "algo.target_update_interval=100",
                 "algo.log_interval=100", "eval.freq=0", "eval.episodes=1"]}
ENV = {"sac": "Pendulum-v1", "td3": "Pendulum-v1", "dqn": "CartPole-v1"}


def _config(algo, extra=()):
    return load_config(os.path.join(CONFIGS, algo, f"{ENV[algo]}.yaml"), SMALL[algo] + list(extra))


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac", "td3", "dqn"])
def test_member_explores_with_its_exported_cells_numbers(tmp_path, algo):
    """After training: the population's acting graph with zero exploration noise gives each member
    exactly its own policy cell's actions; every member Parameter equals its slice of the stacked
    ones; a member's MindIR export verifies bit for bit."""
    cfg = _config(algo)
    seeds = [3, 5]
    run_dir = str(tmp_path / "pop")
    os.makedirs(run_dir)
    dirs = [os.path.join(run_dir, f"seed{s}") for s in seeds]
    for d in dirs:
        os.makedirs(d)
    members = [registry.get(algo)(load_config(None, [f"seed={s}"], data=_as_dict(cfg))) for s in seeds]
    population = registry.get(algo).population(members, dirs, run_dir)
    population.learn()
    assert all(m.num_timesteps == 400 for m in members)
    for stacked, params in population.host_pairs:  # synced at the end
        for k, p in enumerate(params):
            np.testing.assert_array_equal(p.asnumpy(), stacked.asnumpy()[k])
    for _, pairs in population.optimizers.values():  # the actor: written by every gradient step
        for stacked, params in pairs:
            for k, p in enumerate(params):
                np.testing.assert_array_equal(p.asnumpy(), stacked.asnumpy()[k])
    rng = np.random.default_rng(0)
    n = 64
    obs = rng.uniform(-1.0, 1.0, (len(seeds), n, members[0].spec.obs_dim)).astype(np.float32)
    no_noise = np.zeros((len(seeds),) + members[0].exploration_noise(n).shape, np.float32)  # DQN: never explore
    rows = population.act_cell(Tensor(obs), Tensor(no_noise)).asnumpy()
    for k, m in enumerate(members):
        np.testing.assert_array_equal(rows[k, :, :1], m.act_deterministic(obs[k]).reshape(n, 1).astype(np.float32))
    hashes = member_hashes(run_dir, seeds)
    assert len(set(hashes.values())) == 2
    for k, m in enumerate(members):  # the summaries' hashes are the members' final Parameters
        assert hashes[seeds[k]] == m.params_hash()
    out = str(tmp_path / "export")
    export_run(dirs[1], out, golden=128)
    report = verify_export(out, backend="mindspore", episodes=2)
    assert report["passed"] and report["golden"]["bit_identical"]
    assert report["rollouts"]["identical_episodes"] == 2


def _as_dict(cfg):
    from msrl_consistent.config import to_dict
    return to_dict(cfg)


@pytest.mark.slow
def test_warmup_is_the_single_runs_and_training_is_reproducible(tmp_path):
    """Up to learning_starts a member's replay buffer holds exactly what its single run's holds (the
    same env seeds, Generator draws and order); two trainings of one population give the same
    sha256 per member, and two resumes of one interrupted population end bit-identical."""
    warm = ["total_timesteps=100", "algo.save_replay_buffer=true"]
    cfg = _config("sac", warm)
    train_population(cfg, [0, 1], str(tmp_path / "warm"))
    single = registry.get("sac")(load_config(None, ["seed=1"], data=_as_dict(cfg)))
    single.learn(str(tmp_path / "single"), progress=False)
    a, _ = ckpt.load_checkpoint(os.path.join(member_dir(str(tmp_path / "warm"), 1), "checkpoints", "final.safetensors"))
    b, _ = ckpt.load_checkpoint(os.path.join(str(tmp_path / "single"), "checkpoints", "final.safetensors"))
    replay = [key for key in b if key.startswith("replay/")]
    assert replay and all(np.array_equal(a[key], b[key]) for key in replay)

    # two trainings of one population config, each interrupted at its 60th gradient step: every
    # member checkpointed that step, with the same sha256 in both; two resumes of one of them end
    # bit-identical (the envs are reseeded from (seed, steps done), as a single run's resume does)
    cfg = _config("sac", ["total_timesteps=250", "algo.save_replay_buffer=true"])
    seeds = [0, 1]
    original = Rounds.train

    def stop_after_60_updates(self, steps, act_obs=None):
        out = original(self, steps, act_obs)
        if self.members[0].n_updates >= 60:
            self.owner.stop_requested = 15
        return out

    interrupted = {}
    Rounds.train = stop_after_60_updates
    try:
        for name in ("a", "b"):
            with pytest.raises(TrainingInterrupted):
                train_population(cfg, seeds, str(tmp_path / name))
            interrupted[name] = {}
            for s in seeds:
                d = os.path.join(member_dir(str(tmp_path / name), s), "checkpoints")
                assert os.listdir(d) == ["step-000000160.safetensors"]
                interrupted[name][s] = ckpt.load_checkpoint(os.path.join(d, "step-000000160.safetensors"))[1][
                    "params_sha256"]
    finally:
        Rounds.train = original
    assert interrupted["a"] == interrupted["b"] and len(set(interrupted["a"].values())) == 2
    third, fourth = str(tmp_path / "a"), str(tmp_path / "c")
    shutil.copytree(third, fourth)
    resume_population(third).learn()
    resume_population(fourth).learn()
    assert member_hashes(third, seeds) == member_hashes(fourth, seeds)
    members = resume_population(third).members  # their checkpoints hold the synced critics and optimizer state
    for m in members:
        assert set(named_parameters(m.agent)) >= {"q1_target.net.layers.0.weight", "log_alpha"}
        assert int(m.optimizers["critic"].global_step.asnumpy().reshape(-1)[0]) == m.n_updates


@pytest.mark.slow
def test_dqn_population_sweeps_the_learning_rate_reproducibly(tmp_path):
    """`msrl train dqn/CartPole-v1 --seeds 0-1 --sweep learning_rate=...`: four members on stacked
    Q-networks, one learning rate per member; each setting trains with its own values, and a second
    run of the same command gives every member the same sha256."""
    sets = sum((["--set", s] for s in SMALL["dqn"] if not s.startswith("total_timesteps")), [])
    runs = []
    for name in ("a", "b"):
        run_dir = tmp_path / name
        r = msrl("train", "dqn/CartPole-v1", "--seeds", "0-1", "--sweep", "learning_rate=2.3e-3,1e-3",
                 "--total-timesteps", "300", "--run-dir", run_dir, "--quiet", *sets)
        assert r.returncode == 0, r.stderr
        with open(run_dir / "population.json") as fh:
            members = [m["run_dir"] for m in json.load(fh)["members"]]
        hashes = {}
        for m in members:
            with open(run_dir / m / "summary.json") as fh:
                hashes[m] = json.load(fh)["params_sha256"]
        runs.append(hashes)
    assert sorted(runs[0]) == ["learning_rate=0.001-seed0", "learning_rate=0.001-seed1", "learning_rate=0.0023-seed0",
                               "learning_rate=0.0023-seed1"]
    assert runs[0] == runs[1] and len(set(runs[0].values())) == 4


@pytest.mark.slow
def test_offpolicy_population_command_line_and_sweep(tmp_path):
    run_dir = tmp_path / "pop"
    sets = sum((["--set", s] for s in SMALL["td3"] if not s.startswith("total_timesteps")), [])
    r = msrl("train", "td3/Pendulum-v1", "--seeds", "0", "--sweep", "tau=0.005,0.02", "--sweep", "gamma=0.9,0.98",
             "--total-timesteps", "200", "--run-dir", run_dir, "--quiet", *sets)
    assert r.returncode == 0, r.stderr
    with open(run_dir / "population.json") as fh:
        info = json.load(fh)
    assert [m["run_dir"] for m in info["members"]] == ["tau=0.005-gamma=0.9-seed0", "tau=0.005-gamma=0.98-seed0",
                                                        "tau=0.02-gamma=0.9-seed0", "tau=0.02-gamma=0.98-seed0"]
    hashes = set()
    for m in info["members"]:
        with open(run_dir / m["run_dir"] / "summary.json") as fh:
            hashes.add(json.load(fh)["params_sha256"])
    assert len(hashes) == 4  # every setting trained with its own values
    r = msrl("eval", run_dir / info["members"][2]["run_dir"], "--episodes", "1")
    assert r.returncode == 0, r.stderr
    r = msrl("train", "--resume", run_dir)
    assert r.returncode == 0 and "already finished" in r.stdout, r.stdout + r.stderr
