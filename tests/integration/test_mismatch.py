"""The rollout/update mismatch: PPO's first minibatch of every update phase, computed with the
parameters that acted, compared with the log-probabilities the rollout recorded; exactly zero
where the two graphs compute the same numbers, reported (and acted upon) where they do not."""
import json
import os

import numpy as np
import pytest
from helpers import CONFIGS, train_run

from msrl_consistent.algorithms.ppo import PPO
from msrl_consistent.cli import main
from msrl_consistent.populations import member_dir, train_population

FIGURES = ("mismatch_max", "mismatch_k3", "mismatch_max_ratio")
SMALL = ["eval.freq=0", "eval.episodes=1", "log.tensorboard=false"]


def _train_rows(run_dir):
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return [r for r in rows if r.get("kind") == "train"], [r for r in rows if r.get("event") == "mismatch"]


def test_zero_where_the_update_runs_the_rollouts_batch_shape(tmp_path):
    """n_steps 1 and batch_size n_envs: every update's first minibatch has the rollout's batch
    shape, and its log-probabilities are the rollout's bit for bit. Four envs: oneDNN's AVX2 MatMul
    rounds an 8-row batch's rows 0-5 and 6-7 in two blocks, so a shuffled minibatch of 8 moves rows
    across the blocks (up to 4.8e-7 on such a CPU); 4 rows are one block on AVX2 and AVX-512 alike."""
    run, summary, _ = train_run(tmp_path, "ppo/CartPole-v1.yaml",
                                SMALL + ["total_timesteps=256", "env.n_envs=4", "algo.n_steps=1", "algo.batch_size=4"],
                                "zero")
    train, _ = _train_rows(run)
    assert len(train) == 64 and all(r[k] == 0.0 for r in train for k in FIGURES)
    assert summary["mismatch"] == {"k3": 0.0, "max": 0.0, "max_ratio": 0.0}


def _planted(monkeypatch, delta):
    """The rollout's recorded log-probabilities off by ``delta``: what an acting graph that computes
    other numbers than the update (another kernel, precision or activation) would record."""
    original = PPO.train

    def train(self, buf):
        buf.log_probs += np.float32(delta)
        return original(self, buf)
    monkeypatch.setattr(PPO, "train", train)


def test_planted_mismatch_is_reported_warned_and_stops_the_run(tmp_path, monkeypatch, capsys):
    _planted(monkeypatch, 1e-3)
    cfg = os.path.join(CONFIGS, "ppo", "CartPole-v1.yaml")
    sets = sum((["--set", s] for s in SMALL + ["log.mismatch_threshold=1e-4"]), [])
    warn = str(tmp_path / "warn")
    assert main(["train", cfg, "--run-dir", warn, "--total-timesteps", "768", "--quiet", *sets]) == 0
    err = capsys.readouterr().err
    assert err.count("rollout/update mismatch") == 1 and "log.mismatch_threshold 0.0001" in err, err
    train, events = _train_rows(warn)
    assert len(events) == len(train) == 3
    assert all(r["mismatch_max"] == pytest.approx(1e-3, rel=1e-3) for r in train)  # the planted offset, measured
    assert all(r["mismatch_k3"] == pytest.approx(0.5e-6, rel=0.05) for r in train)  # exp(d) - 1 - d ~ d^2 / 2
    summary = json.load(open(os.path.join(warn, "summary.json")))
    assert summary["mismatch"]["max"] == pytest.approx(1e-3, rel=1e-3)
    png = str(tmp_path / "mismatch.png")
    assert main(["plot", warn, "--metric", "mismatch", "--out", png]) == 0 and os.path.getsize(png) > 0
    assert "rollout/update mismatch" in capsys.readouterr().out

    stop = str(tmp_path / "stop")
    rc = main(["train", cfg, "--run-dir", stop, "--total-timesteps", "768", "--quiet", *sets,
               "--set", "log.mismatch_action=stop"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "training stopped, checkpoint" in err and "step-000000256.safetensors" in err
    assert os.path.isfile(os.path.join(stop, "checkpoints", "step-000000256.safetensors"))
    assert not os.path.exists(os.path.join(stop, "summary.json"))


@pytest.mark.slow
def test_population_members_report_their_own_mismatch(tmp_path):
    """The stacked update (BatchMatMul) against each member's own acting cells: every member's
    summary has its figures, small but not assumed zero."""
    from msrl_consistent.config import load_config
    cfg = load_config(os.path.join(CONFIGS, "ppo", "CartPole-v1.yaml"), SMALL + ["total_timesteps=512"])
    train_population(cfg, [0, 1], str(tmp_path / "pop"))
    for seed in (0, 1):
        summary = json.load(open(os.path.join(member_dir(str(tmp_path / "pop"), seed), "summary.json")))
        assert set(summary["mismatch"]) == {"k3", "max", "max_ratio"}
        assert 0.0 <= summary["mismatch"]["max"] < 1e-4


def test_offpolicy_zero_at_the_acting_batch_shape(tmp_path):
    """SAC with batch_size n_envs: the update's actor sees the acting cell's batch shape, and the
    acting and update outputs agree bit for bit at every log point."""
    _, summary, _ = train_run(tmp_path, "sac/Pendulum-v1.yaml",
                              SMALL + ["total_timesteps=600", "algo.learning_starts=200", "algo.log_interval=100",
                                       "env.n_envs=4", "algo.batch_size=4"], "sac")
    assert summary["mismatch"] == {"max": 0.0}


@pytest.mark.slow
def test_offpolicy_population_reports_a_member_that_acts_on_other_numbers(tmp_path):
    """A DQN population's members act through their own Q-networks, which every gradient step
    overwrites with their slices of the stacked ones: a member whose own network is planted off by
    1e-3 shows it in its figure, the other does not."""
    from msrl_consistent import registry
    from msrl_consistent.config import load_config, to_dict
    cfg = load_config(os.path.join(CONFIGS, "dqn", "CartPole-v1.yaml"),
                      SMALL + ["total_timesteps=400", "algo.learning_starts=100", "algo.train_freq=50",
                               "algo.gradient_steps=10", "policy.net_arch=[32,32]", "algo.batch_size=32"])
    dirs = [str(tmp_path / f"seed{s}") for s in (0, 1)]
    for d in dirs:
        os.makedirs(d)
    members = [registry.get("dqn")(load_config(None, [f"seed={s}"], data=to_dict(cfg))) for s in (0, 1)]
    population = registry.get("dqn").population(members, dirs, str(tmp_path))
    population.learn()
    before = population.rounds.mismatch()
    assert all(f is not None and f < 1e-4 for f in before), before
    bias = members[0].agent.actor.layers[-1].bias
    bias.set_data(bias + 1e-3)
    after = population.rounds.mismatch()
    assert after[0] == pytest.approx(1e-3, rel=0.01) and after[1] == before[1], after


def test_offpolicy_population_graphs_compiled_after_a_check(tmp_path):
    """The check reads the members' policy networks without renaming their Parameters: a SAC
    population whose last round compiles its last graph after a mismatch check trains to the end,
    and every member reports its figure."""
    code = main(["train", os.path.join(CONFIGS, "sac", "Pendulum-v1.yaml"), "--seeds", "0-1", "--quiet",
                 "--run-dir", str(tmp_path / "pop"), "--total-timesteps", "400",
                 *[a for kv in SMALL + ["algo.learning_starts=100", "algo.log_interval=200", "algo.batch_size=32",
                                        "policy.net_arch=[16,16]"] for a in ("--set", kv)]])
    assert code == 0
    for seed in (0, 1):
        summary = json.load(open(os.path.join(member_dir(str(tmp_path / "pop"), seed), "summary.json")))
        assert 0.0 <= summary["mismatch"]["max"] < 1e-4
