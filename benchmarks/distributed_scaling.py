"""Steps/s with 1 and N msrun workers (PPO, SAC, TD3), side by side in one run, and the eval return.

    python benchmarks/distributed_scaling.py --workers 1 2 --config configs/ppo/CartPole-v1.yaml
    python benchmarks/distributed_scaling.py --workers 2 --seeds 0 1 2 --config configs/sac/Pendulum-v1.yaml

Each launch is `msrl train CONFIG --workers W` (W=1 is a plain process); total_timesteps counts
the steps of all ranks. Reports wall time, steps/s of rank 0, the eval mean return over 10
episodes, and whether all ranks ended with the same parameter sha256.
"""
import argparse
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    """A port nobody listens on now (a fixed one collides with a scheduler still shutting down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="configs/ppo/CartPole-v1.yaml")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--workdir")
    args = p.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="msrl-dist-")
    env = dict(os.environ, GLOG_v="3")
    rows = []
    for seed, w in [(s, w) for s in args.seeds for w in args.workers]:
        run = os.path.join(work, f"s{seed}-w{w}")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "msrl_consistent", "train", args.config, "--workers", str(w), "--seed",
                        str(seed), "--run-dir", run, "--quiet", "--set", "eval.freq=0",
                        "--master-port", str(free_port())], check=True, env=env)
        wall = time.perf_counter() - t0
        summary = json.load(open(os.path.join(run, "summary.json")))
        ranks = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(run, "ranks", "*.json")))]
        same = len({r["params_sha256"] for r in ranks}) <= 1
        ev = json.loads(subprocess.run([sys.executable, "-m", "msrl_consistent", "eval", run, "--episodes", "10",
                                        "--seed", "1000", "--json"], check=True, capture_output=True, text=True,
                                       env=env).stdout)
        rows.append({"seed": seed, "workers": w, "steps": summary["num_timesteps"], "wall_s": round(wall, 1),
                     "steps_per_s": summary["steps_per_second"], "eval_mean_return": ev["mean_return"],
                     "ranks_identical": same if ranks else None})
        print(json.dumps(rows[-1]), flush=True)
    print("\n| seed | workers | steps | wall time (s) | steps/s (rank 0) | eval mean return | ranks identical |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['seed']} | {r['workers']} | {r['steps']} | {r['wall_s']} | {r['steps_per_s']} | {r['eval_mean_return']:.1f} | "
              f"{r['ranks_identical']} |")


if __name__ == "__main__":
    main()
