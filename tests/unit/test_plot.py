"""`msrl plot` on synthetic run directories: two configs x three seeds -> two mean +- std bands."""
import json
import os

import numpy as np
import pytest
import yaml
from helpers import msrl

from msrl_consistent.config import ConfigError
from msrl_consistent.plot import band, group_curves, plot_runs, read_curve

pytest.importorskip("matplotlib")


def fake_run(root, name, lr, seed, steps=(2000, 4000, 6000, 8000, 10000), resumed_at=None):
    run = os.path.join(str(root), name)
    os.makedirs(run)
    cfg = {"algorithm": "ppo", "seed": seed, "total_timesteps": 10000, "env": {"id": "CartPole-v1", "n_envs": 8},
           "algo": {"learning_rate": lr, "n_steps": 32}}
    with open(os.path.join(run, "config.yaml"), "w") as fh:
        yaml.safe_dump(cfg, fh)
    rng = np.random.default_rng(seed)
    with open(os.path.join(run, "metrics.jsonl"), "w") as fh:
        for i, s in enumerate(steps):
            t = 0.5 * (i + 1) if resumed_at is None or s < resumed_at else 0.5 * (i + 1 - resumed_at / 2000 + 1)
            if resumed_at is not None and s == resumed_at:
                fh.write(json.dumps({"kind": "event", "step": s - 1, "event": "resumed", "checkpoint": "x"}) + "\n")
            quality = s / 10000 * (500 if lr > 5e-4 else 200)
            fh.write(json.dumps({"kind": "train", "step": s, "time": t, "loss": 1.0,
                                 "recent_mean_return": quality + rng.normal(0, 10)}) + "\n")
            if s % 4000 == 0 or s == steps[-1]:
                fh.write(json.dumps({"kind": "eval", "step": s, "time": t + 0.1,
                                     "mean_return": quality + rng.normal(0, 20), "std_return": 1.0}) + "\n")
        fh.write('{"kind": "train", "step": 99')  # a line cut by a kill is skipped
    return run


@pytest.fixture
def runs(tmp_path):
    return [fake_run(tmp_path, f"lr{lr}-s{seed}", lr, seed) for lr in (1e-3, 1e-4) for seed in (0, 1, 2)]


def test_groups_by_config_without_seed(runs):
    groups = group_curves([read_curve(r, "train") for r in runs])
    assert len(groups) == 2 and [len(g.curves) for g in groups] == [3, 3]
    assert "algo.learning_rate=0.001" in groups[0].label and "3 seeds" in groups[0].label
    assert "algo.learning_rate=0.0001" in groups[1].label


def test_band_is_mean_and_std_on_the_common_range(tmp_path):
    a = fake_run(tmp_path, "a", 1e-3, 0, steps=(1000, 2000, 3000, 4000))
    b = fake_run(tmp_path, "b", 1e-3, 1, steps=(2000, 4000, 6000))
    ca, cb = read_curve(a, "train"), read_curve(b, "train")
    grid, mean, std = band([ca, cb])
    assert grid[0] == 2000 and grid[-1] == 4000  # only where both runs have data: nothing extrapolated
    ya, yb = np.interp(grid, ca.x, ca.y), np.interp(grid, cb.x, cb.y)
    np.testing.assert_allclose(mean, (ya + yb) / 2)
    np.testing.assert_allclose(std, np.abs(ya - yb) / 2)


def test_time_axis_continues_across_a_resume(tmp_path):
    run = fake_run(tmp_path, "r", 1e-3, 0, resumed_at=6000)
    c = read_curve(run, "train", x="time")
    assert np.all(np.diff(c.x) > 0), c.x


@pytest.mark.parametrize("metric,x", [("eval", "steps"), ("train", "time")])
def test_plot_writes_a_png(runs, tmp_path, metric, x):
    out = str(tmp_path / "curves.png")
    groups = plot_runs(runs, out, x=x, metric=metric)
    assert len(groups) == 2
    with open(out, "rb") as fh:
        head = fh.read(8)
    assert head == b"\x89PNG\r\n\x1a\n" and os.path.getsize(out) > 20_000


def test_cli_plot(runs, tmp_path):
    out = tmp_path / "cli.png"
    r = msrl("plot", *runs, "--out", out, "--metric", "eval")
    assert r.returncode == 0, r.stderr
    assert "6 run(s) in 2 group(s): evaluation mean return" in r.stdout and out.stat().st_size > 20_000
    assert "from 4000 " in r.stdout  # the first periodic evaluation


def test_cli_plot_default_draws_the_training_return_from_the_first_rollout(runs, tmp_path):
    # the README's command (no --metric) draws the curve that shows learning, from the first update on
    out = tmp_path / "default.png"
    r = msrl("plot", *runs, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "training mean return (recent episodes) against environment steps from 2000 " in r.stdout, r.stdout


def test_not_a_run_directory(tmp_path):
    with pytest.raises(ConfigError, match="is not a run directory"):
        read_curve(str(tmp_path), "eval")
    r = msrl("plot", tmp_path / "nope", "--out", tmp_path / "x.png")
    assert r.returncode == 2 and r.stderr.startswith("msrl: error:") and "Traceback" not in r.stderr
