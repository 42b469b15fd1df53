"""A multi-seed PPO, SAC or TD3 study, every way this machine can run it: whole-study wall time and every seed's return.

    pip install torch==2.13.0                       # first: the CPU wheel on this disk
    pip install stable-baselines3 "numpy<2"
    python benchmarks/population_vs_sb3.py --seeds 0 1 2 3 4 --total-timesteps 100000
    python benchmarks/population_vs_sb3.py --config configs/sac/Pendulum-v1.yaml --total-timesteps 5000 \
        --modes msrl-population msrl-population-jobs sb3-1-parallel sb3-default-sequential   # SAC
    python benchmarks/population_vs_sb3.py --modes msrl-population sb3-1-parallel --json runs/study.json
    python benchmarks/population_vs_sb3.py --seeds 0 --sweep learning_rate=3e-4,1e-3,2e-3,3e-3 \
        --sweep clip_range=0.1,0.2,0.3,0.4 --modes msrl-population-jobs sb3-1-parallel   # a 16-setting sweep

A study's members are its seeds, or with --sweep (as `msrl train --sweep`: a grid, each setting
with every seed) its settings x seeds; SB3 and msrl one-run modes run each setting from a copy of
the config with the setting's values.

Modes, each timed from outside as whole processes (start-up, imports, compilation included):
  msrl-population     one `msrl train C --seeds ...` process: every seed in one graph per phase
  msrl-population-jobs  `msrl train C --seeds ... --jobs J` (--jobs, default 2): the seeds in J
                      groups, one process per core, each group in one graph per phase
  msrl-sequential     `msrl train C --seed S`, one seed after another
  sb3-1-sequential    Stable-Baselines3 with 1 torch thread, one seed after another
  sb3-default-sequential  Stable-Baselines3 with torch's default threads, one after another
  sb3-1-parallel      Stable-Baselines3 with 1 torch thread, --parallel runs at a time (default 2,
                      one per core: SB3's best use of a 2-core machine)
The SB3 worker is benchmarks/ppo_vs_sb3.py's for PPO and benchmarks/offpolicy_pendulum.py's for
SAC and TD3 (same hyperparameters from C; 10 evaluation episodes). The ratios quoted are each
msrl population mode's wall time over the fastest SB3 mode's.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import yaml

from msrl_consistent import populations, registry
from msrl_consistent.populations import member_settings, parse_sweep

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("msrl-population", "msrl-population-jobs", "msrl-sequential", "sb3-1-sequential", "sb3-default-sequential", "sb3-1-parallel")


def msrl_cmd():
    exe = os.path.join(os.path.dirname(sys.executable), "msrl")
    return [exe] if os.path.isfile(exe) else [shutil.which("msrl") or "msrl"]


def members(args):
    """(setting, seed) of every member, in msrl's member order and with msrl's reading of --sweep."""
    algo = config_of(args.config).get("algorithm", "ppo")
    settings = member_settings(args.seeds, parse_sweep(args.sweep, registry.get(algo).population.sweepable))
    return [({k: v for k, v in st.items() if k != "seed"}, st["seed"]) for st in settings]


def member_name(setting, seed):
    return populations.member_name(dict(setting, seed=seed))


def setting_config(args, work, setting):
    """A copy of the config with the setting's values (the config itself when there is none)."""
    if not setting:
        return args.config
    with open(args.config) as fh:
        cfg = yaml.safe_load(fh)
    for key, value in setting.items():
        cfg.setdefault("algo", {})[key.partition(".")[2]] = value
    path = os.path.join(work, member_name(setting, "x") + ".yaml")
    with open(path, "w") as fh:
        yaml.safe_dump(cfg, fh)
    return path


def run(cmd, label, **env):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, GLOG_v="3", **env))
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise SystemExit(f"population_vs_sb3: error: {label} exited {proc.returncode}: {last}")
    return wall, proc.stdout


def msrl_sets(args):
    return ["--total-timesteps", str(args.total_timesteps), "--quiet", "--set", f"eval.episodes={args.eval_episodes}",
            "--set", "eval.freq=0"]


def summary_of(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as fh:
        return json.load(fh)


def msrl_population(args, work, jobs=1):
    run_dir = os.path.join(work, f"population-jobs{jobs}")
    seeds = ",".join(map(str, args.seeds))
    sweep = sum((["--sweep", spec] for spec in args.sweep), [])
    wall, _ = run(msrl_cmd() + ["train", args.config, "--seeds", seeds, "--run-dir", run_dir, "--jobs", str(jobs)]
                  + sweep + msrl_sets(args), f"msrl population (--jobs {jobs})")
    s = summary_of(run_dir)
    ms = [s["members"][member_name(setting, seed)] for setting, seed in members(args)]
    return wall, [m["final_eval"]["mean_return"] for m in ms], [m["params_sha256"] for m in ms]


def msrl_one(args, work, member):
    setting, seed = member
    run_dir = os.path.join(work, f"msrl-{member_name(setting, seed)}")
    sets = sum((["--set", f"{k}={v}"] for k, v in setting.items()), [])
    wall, _ = run(msrl_cmd() + ["train", args.config, "--seed", str(seed), "--run-dir", run_dir] + sets
                  + msrl_sets(args), f"msrl {member_name(setting, seed)}")
    s = summary_of(run_dir)
    return wall, s["final_eval"]["mean_return"], s["params_sha256"]


def config_of(path):
    with open(path) as fh:
        return yaml.safe_load(fh)


def sb3_one(args, work, member, threads):
    setting, seed = member
    cfg = config_of(args.config)
    algo = cfg.get("algorithm", "ppo")
    if algo != "ppo":  # SAC / TD3: offpolicy_pendulum.py's worker, the config's own learning_starts
        out = os.path.join(work, f"sb3-{member_name(setting, seed)}-t{threads}.json")
        cmd = [sys.executable, os.path.join(HERE, "offpolicy_pendulum.py"), "--sb3-worker", algo, cfg["env"]["id"],
               str(args.total_timesteps), str(seed), out, str(threads), "-1", setting_config(args, work, setting)]
        wall, _ = run(cmd, f"SB3 {member_name(setting, seed)} ({threads or 'default'} threads)",
                      **({"OMP_NUM_THREADS": "1"} if threads == 1 else {}))
        with open(out) as fh:
            return wall, json.load(fh)["mean_return"]
    cmd = [sys.executable, os.path.join(HERE, "ppo_vs_sb3.py"), "--worker", "sb3", "--threads", str(threads),
           "--config", setting_config(args, work, setting), "--seed", str(seed), "--total-timesteps", str(args.total_timesteps),
           "--eval-episodes", str(args.eval_episodes)]
    wall, out = run(cmd, f"SB3 {member_name(setting, seed)} ({threads or 'default'} threads)")
    return wall, json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])["mean_return"]


def study(args, mode, work):
    t0 = time.perf_counter()
    if mode.startswith("msrl-population"):
        _, returns, hashes = msrl_population(args, work, args.jobs if mode.endswith("jobs") else 1)
        return {"wall_s": time.perf_counter() - t0, "returns": returns, "params_sha256": hashes}
    if mode == "msrl-sequential":
        runs = [msrl_one(args, work, m) for m in members(args)]
        return {"wall_s": time.perf_counter() - t0, "returns": [r[1] for r in runs],
                "params_sha256": [r[2] for r in runs], "per_run_s": [r[0] for r in runs]}
    if mode == "sb3-1-parallel":
        with ThreadPoolExecutor(args.parallel) as pool:
            runs = list(pool.map(lambda m: sb3_one(args, work, m, 1), members(args)))
    else:
        threads = 1 if mode == "sb3-1-sequential" else 0
        runs = [sb3_one(args, work, m, threads) for m in members(args)]
    return {"wall_s": time.perf_counter() - t0, "returns": [r[1] for r in runs], "per_run_s": [r[0] for r in runs]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join("configs", "ppo", "CartPole-v1.yaml"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--total-timesteps", type=int, default=100000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--parallel", type=int, default=2, help="SB3 runs at a time in sb3-1-parallel")
    p.add_argument("--jobs", type=int, default=2, help="msrl processes in msrl-population-jobs")
    p.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2",
                   help="a grid of settings, as msrl train --sweep (each with every seed)")
    p.add_argument("--json", metavar="OUT", help="write the results here")
    args = p.parse_args()
    if not os.path.isfile(args.config):
        raise SystemExit(f"population_vs_sb3: error: config {args.config} not found")
    work = tempfile.mkdtemp(prefix="population-vs-sb3-")
    results = {}
    for mode in args.modes:
        results[mode] = study(args, mode, work)
        r = results[mode]
        print(f"{mode:24s} {r['wall_s']:8.1f} s   returns {' '.join(f'{x:.1f}' for x in r['returns'])}", flush=True)
    sb3 = {m: r["wall_s"] for m, r in results.items() if m.startswith("sb3")}
    names = [member_name(setting, seed) for setting, seed in members(args)]
    print(f"\n| mode | study wall (s) | per member (s) | returns ({', '.join(names)}) |")
    print("| --- | --- | --- | --- |")
    for mode, r in results.items():
        print(f"| {mode} | {r['wall_s']:.1f} | {r['wall_s'] / len(names):.1f} | "
              f"{', '.join(f'{x:.1f}' for x in r['returns'])} |")
    for mode in ("msrl-population", "msrl-population-jobs"):
        if mode in results and sb3:
            best = min(sb3, key=sb3.get)
            print(f"\n{mode} / fastest SB3 ({best}): {results[mode]['wall_s'] / sb3[best]:.2f}x")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"config": args.config, "seeds": args.seeds, "total_timesteps": args.total_timesteps,
                       "jobs": args.jobs, "sweep": args.sweep, "members": names,
                       "date": time.strftime("%Y-%m-%d %H:%M"), "results": results}, fh, indent=2)


if __name__ == "__main__":
    main()
