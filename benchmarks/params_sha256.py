"""Parameter sha256 of short training runs: the before/after proof for refactors and speed work.

Runs each case through the `msrl` CLI (one process each, so nothing is shared between them) and
prints one line per case: name, params_sha256 from summary.json (a population: one line per
member, ``name[member]``), wall time. Run it on the commit before a change and on the change;
equal hashes mean the change kept training bit-identical on this machine's threading setup.
``--populations`` runs the population cases (several seeds, a learning-rate sweep) instead;
``--pipeline overlap`` runs the cases with ``env.pipeline: overlap`` (cases with one env are
left out: the overlap needs two).

    python benchmarks/params_sha256.py [--only NAME ...] [--pipeline overlap] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(os.path.dirname(HERE), "configs")

# name -> (config, total_timesteps, extra --set overrides)
CASES = {
    # 8 envs x 32 steps, batch 256, 20 epochs: one minibatch per epoch, linear schedules
    "ppo-cartpole": ("ppo/CartPole-v1.yaml", 4096, []),
    # several minibatches per epoch (batch 64 of 1024), and target_kl stopping some updates early
    "ppo-cartpole-minibatches": ("ppo/CartPole-v1.yaml", 4096,
                                 ["algo.batch_size=64", "algo.n_epochs=4", "algo.target_kl=0.01"]),
    # continuous, observation normalization, 4 envs x 1024 steps, batch 64
    "ppo-pendulum": ("ppo/Pendulum-v1.yaml", 8192, []),
    # recurrent: LSTM actor and critic, 32-step sequences through backprop in time, reward normalization
    "ppo-cartpolenovel-lstm": ("ppo/CartPoleNoVel-v1-lstm.yaml", 4096, []),
    "sac-pendulum": ("sac/Pendulum-v1.yaml", 1000, []),
    "td3-pendulum": ("td3/Pendulum-v1.yaml", 1000, ["algo.learning_starts=200", "algo.train_freq=100",
                                                    "algo.gradient_steps=100"]),
    # epsilon-greedy acting, target updates on the environment-step clock, gradient clipping
    "dqn-cartpole": ("dqn/CartPole-v1.yaml", 3000, ["algo.learning_starts=500", "algo.target_update_interval=300"]),
    # images (pip install -e .[atari]): raw frames preprocessed in the cell, frame-wise rollout, 1.7M
    # parameters (the gradient norm's long-vector sum); 3 rollouts and update phases, evaluation capped
    "ppo-breakout": ("ppo/Breakout-v5.yaml", 3072, ["eval.episodes=1", "eval.max_steps=100"]),
}

# populations: name -> (config, total_timesteps, extra msrl train arguments); every member's hash
POPULATION_CASES = {
    # the stacked update's lean Categorical head (batch 256, a power of two)
    "pop-ppo-cartpole": ("ppo/CartPole-v1.yaml", 4096, ["--seeds", "0-2"]),
    # the general loss path with an entropy bonus, and a ragged last minibatch (1024 rows, batch 96)
    "pop-ppo-cartpole-ragged": ("ppo/CartPole-v1.yaml", 4096, ["--seeds", "0-1", "--set", "algo.batch_size=96",
                                                              "--set", "algo.n_epochs=3", "--set", "algo.ent_coef=0.01"]),
    # one learning rate per member (MemberRateAdam)
    "pop-ppo-cartpole-sweep": ("ppo/CartPole-v1.yaml", 4096, ["--seeds", "0", "--sweep",
                                                             "algo.learning_rate=1e-3,3e-4"]),
    # Gaussian actions, observation normalization
    "pop-ppo-pendulum": ("ppo/Pendulum-v1.yaml", 8192, ["--seeds", "0-1"]),
    "pop-sac-pendulum": ("sac/Pendulum-v1.yaml", 1000, ["--seeds", "0-1"]),
    "pop-td3-pendulum": ("td3/Pendulum-v1.yaml", 1000, ["--seeds", "0-1", "--set", "algo.learning_starts=200",
                                                       "--set", "algo.train_freq=100", "--set", "algo.gradient_steps=100"]),
    # the members' Q-networks stacked, each clipped by its own gradient norm; one learning rate per member
    "pop-dqn-cartpole-sweep": ("dqn/CartPole-v1.yaml", 3000, ["--seeds", "0-1", "--sweep", "algo.learning_rate=2.3e-3,1e-3",
                                                             "--set", "algo.learning_starts=500",
                                                             "--set", "algo.target_update_interval=300"]),
}


def run_case(name: str, workdir: str, pipeline: str = "sequential", overrides: tuple = ()) -> list:
    """[{case, params_sha256, wall_s}]: one row, or one per member of a population case."""
    population = name in POPULATION_CASES
    if population:
        cfg, steps, extra = POPULATION_CASES[name]
    else:
        cfg, steps, sets = CASES[name]
        extra = ["--seed", "0", *[a for s in sets for a in ("--set", s)]]
    run_dir = os.path.join(workdir, name)
    cmd = ["msrl", "train", os.path.join(CONFIGS, cfg), "--total-timesteps", str(steps),
           "--run-dir", run_dir, "--quiet", "--set", "eval.episodes=2", "--set", f"env.pipeline={pipeline}", *extra,
           *[a for s in overrides for a in ("--set", s)]]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name}: msrl train exited {proc.returncode}\n{proc.stderr[-2000:]}")
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    if not population:
        return [{"case": name, "params_sha256": summary["params_sha256"], "wall_s": round(wall, 1)}]
    return [{"case": f"{name}[{member}]", "params_sha256": s["params_sha256"], "wall_s": round(wall, 1)}
            for member, s in summary["members"].items()]


def one_env(name: str) -> bool:
    """The case's config trains with one env (the overlap refuses it)."""
    import yaml
    cfg = (POPULATION_CASES.get(name) or CASES[name])[0]
    with open(os.path.join(CONFIGS, cfg)) as f:
        return int(yaml.safe_load(f).get("env", {}).get("n_envs", 1)) < 2


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", choices=sorted(CASES) + sorted(POPULATION_CASES), help="run these cases only")
    p.add_argument("--populations", action="store_true", help="run the population cases")
    p.add_argument("--pipeline", choices=["sequential", "overlap"], default="sequential", help="env.pipeline of every case")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override added to every case (e.g. env.n_envs=2)")
    p.add_argument("--json", help="also write the results to this JSON file")
    args = p.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="msrl-sha-") as d:
        for name in args.only or list(POPULATION_CASES if args.populations else CASES):
            if args.pipeline == "overlap" and one_env(name) and not any(s.startswith("env.n_envs=") for s in args.set):
                continue
            for r in run_case(name, d, args.pipeline, tuple(args.set)):
                results.append(r)
                print(f"{r['case']:34s} {r['params_sha256']}  {r['wall_s']:7.1f} s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
