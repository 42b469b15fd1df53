"""Parameter sha256 of short training runs: the before/after proof for refactors and speed work.

Runs each case through the `msrl` CLI (one process each, so nothing is shared between them) and
prints one line per case: name, params_sha256 from summary.json, wall time. Run it on the
commit before a change and on the change; equal hashes mean the change kept training
bit-identical on this machine's threading setup.

    python benchmarks/params_sha256.py [--only NAME ...] [--json FILE]
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
}


def run_case(name: str, workdir: str) -> dict:
    cfg, steps, sets = CASES[name]
    run_dir = os.path.join(workdir, name)
    cmd = ["msrl", "train", os.path.join(CONFIGS, cfg), "--seed", "0", "--total-timesteps", str(steps),
           "--run-dir", run_dir, "--quiet", "--set", "eval.episodes=2", *[a for s in sets for a in ("--set", s)]]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name}: msrl train exited {proc.returncode}\n{proc.stderr[-2000:]}")
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    return {"case": name, "params_sha256": summary["params_sha256"], "wall_s": round(wall, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", choices=sorted(CASES), help="run these cases only")
    p.add_argument("--json", help="also write the results to this JSON file")
    args = p.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="msrl-sha-") as d:
        for name in args.only or list(CASES):
            r = run_case(name, d)
            results.append(r)
            print(f"{r['case']:26s} {r['params_sha256']}  {r['wall_s']:7.1f} s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
