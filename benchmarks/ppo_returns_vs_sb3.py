"""PPO returns side by side: msrl and Stable-Baselines3 on the same config, budget and seeds.

    python benchmarks/ppo_returns_vs_sb3.py --config configs/ppo/HalfCheetah-v5.yaml \\
        --total-timesteps 200000 --seeds 0 1 2 --json runs/halfcheetah_vs_sb3.json

One training process at a time, alternating sides per seed (msrl first for even seeds). msrl is
`msrl train CONFIG --seed S --total-timesteps N --set eval.freq=0`; SB3 is the worker of
ppo_vs_sb3.py with one torch thread (its hyperparameters read from the same YAML: RL-Zoo's values
for the shipped RL-Zoo configs, VecNormalize for normalize_obs / normalize_reward, use_sde).
Both end with the same evaluation: --eval-episodes deterministic episodes reset with seeds
seed + eval.seed_offset + i. Results are appended to --json after every run (a partial set of
seeds is kept). "Within seed noise" is judged by Welch's t of the two sides' mean returns
(|t| < 2), printed with the numbers it comes from.
"""
import argparse
import json
import math
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from ppo_vs_sb3 import run_msrl, run_sb3  # noqa: E402


def welch_t(a, b):
    """Welch's t statistic of mean(a) - mean(b) (None with fewer than 2 values on a side)."""
    if len(a) < 2 or len(b) < 2:
        return None
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    return (statistics.mean(a) - statistics.mean(b)) / se if se > 0 else None


def summarize(rows, config, steps, n_eval):
    by = {side: [r["mean_return"] for r in rows if r["side"] == side] for side in ("msrl", "sb3-1")}
    print(f"\nPPO {config}, {steps} steps, eval = mean return over {n_eval} deterministic episodes\n")
    print("| seed | msrl | SB3 (1 thread) | msrl wall (s) | SB3 wall (s) |")
    print("| --- | --- | --- | --- | --- |")
    for seed in sorted({r["seed"] for r in rows}):
        m = next((r for r in rows if r["seed"] == seed and r["side"] == "msrl"), {})
        s = next((r for r in rows if r["seed"] == seed and r["side"] == "sb3-1"), {})
        cell = lambda r, k, nd=1: "n/a" if r.get(k) is None else f"{r[k]:.{nd}f}"  # noqa: E731
        print(f"| {seed} | {cell(m, 'mean_return')} | {cell(s, 'mean_return')} | {cell(m, 'wall_s')} | "
              f"{cell(s, 'wall_s')} |")
    for side, v in by.items():
        if v:
            sd = statistics.stdev(v) if len(v) > 1 else float("nan")
            print(f"\n{side}: mean {statistics.mean(v):.1f}, std over seeds {sd:.1f}, n={len(v)}, "
                  f"min {min(v):.1f}, max {max(v):.1f}")
    t = welch_t(by["msrl"], by["sb3-1"])
    if t is None:
        print("\nWelch's t: n/a (fewer than 2 seeds on a side)")
    else:
        verdict = "within seed noise" if abs(t) < 2 else "NOT within seed noise"
        print(f"\nWelch's t (msrl - SB3) = {t:.2f}: {verdict} (criterion |t| < 2)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--total-timesteps", type=int, default=200000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--json", metavar="OUT", help="append every finished run here (and read earlier ones)")
    p.add_argument("--workdir", help="where msrl run dirs go (default: a new temp dir)")
    p.add_argument("--summarize", action="store_true", help="only print the table of --json")
    args = p.parse_args()
    if not os.path.isfile(args.config):
        raise SystemExit(f"ppo_returns_vs_sb3: error: config {args.config} not found")
    other = []  # runs of other budgets in --json, kept in the file
    rows = []
    if args.json and os.path.isfile(args.json):
        with open(args.json) as f:
            for r in json.load(f)["runs"]:
                (rows if r.get("total_timesteps") == args.total_timesteps else other).append(r)
    if not args.summarize:
        work = args.workdir or tempfile.mkdtemp(prefix="ppo-returns-")
        os.makedirs(work, exist_ok=True)
        wargs = argparse.Namespace(config=args.config, total_timesteps=args.total_timesteps,
                                   eval_episodes=args.eval_episodes, periodic_eval=False)
        for seed in args.seeds:
            sides = ["msrl", "sb3-1"] if seed % 2 == 0 else ["sb3-1", "msrl"]
            for side in sides:
                if any(r["seed"] == seed and r["side"] == side for r in rows):
                    continue
                r = run_msrl(wargs, seed, work) if side == "msrl" else run_sb3(wargs, seed, 1)
                r = {k: v for k, v in r.items() if k in ("side", "seed", "wall_s", "train_s", "steps",
                                                         "steps_per_second", "mean_return", "returns",
                                                         "params_sha256", "run_dir")}
                r["total_timesteps"] = args.total_timesteps
                rows.append(r)
                print(f"# {side} seed {seed}: return {r['mean_return']:.1f}, {r['wall_s']:.0f} s", flush=True)
                if args.json:
                    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
                    with open(args.json, "w") as f:
                        json.dump({"config": args.config, "runs": other + rows}, f, indent=2)
    summarize(rows, args.config, args.total_timesteps, args.eval_episodes)


if __name__ == "__main__":
    main()
