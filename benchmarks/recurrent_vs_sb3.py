"""Memory matters: recurrent and MLP PPO on a velocity-masked task, msrl beside sb3-contrib's RecurrentPPO.

    pip install torch==2.13.0                       # first: the CPU wheel on this disk
    pip install stable-baselines3 sb3-contrib "numpy<2"
    python benchmarks/recurrent_vs_sb3.py --seeds 0 1 2 3 4 --json runs/recurrent.json
    python benchmarks/recurrent_vs_sb3.py --modes msrl-lstm msrl-mlp --seeds 0 1
    python benchmarks/recurrent_vs_sb3.py --task pendulum --seeds 0 1

--task cartpole (default): CartPoleNoVel-v1; --task pendulum: PendulumNoVel-v1, the LSTM config
configs/ppo/PendulumNoVel-v1-lstm.yaml and, for msrl-mlp, RL-Zoo's Pendulum-v1 gSDE recipe
(configs/ppo/Pendulum-v1-gsde.yaml) on the masked task.

Modes, each one training process per seed, --parallel of them at a time (default 2: one per
core, the best use of this machine for either side), each timed from outside as a whole process
(start-up, imports and compilation included):
  msrl-lstm           msrl train configs/ppo/CartPoleNoVel-v1-lstm.yaml (RL-Zoo's RecurrentPPO recipe)
  msrl-mlp            msrl's MLP PPO with RL-Zoo's CartPole-v1 recipe on the same masked task
  sb3c-lstm-1         sb3-contrib RecurrentPPO, the same recipe, 1 torch thread
  sb3c-lstm-default   the same with torch's default thread count
Each run ends with the same evaluation: 10 deterministic episodes reset with seeds
seed + eval.seed_offset + i (msrl's final eval; sb3's evaluate_policy, which carries the LSTM
state, on seeded envs). The SB3 worker is benchmarks/ppo_vs_sb3.py's.
"""
import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from population_vs_sb3 import msrl_cmd, run, summary_of  # noqa: E402

ROOT = os.path.dirname(HERE)
TASKS = {  # the recurrent config, the MLP recipe and the masked task it runs on
    "cartpole": ("CartPoleNoVel-v1-lstm.yaml", "CartPole-v1.yaml", "CartPoleNoVel-v1"),
    "pendulum": ("PendulumNoVel-v1-lstm.yaml", "Pendulum-v1-gsde.yaml", "PendulumNoVel-v1"),
}
MODES = ("msrl-lstm", "msrl-mlp", "sb3c-lstm-1", "sb3c-lstm-default")


def task_configs(task):
    lstm, mlp, env_id = TASKS[task]
    return os.path.join(ROOT, "configs", "ppo", lstm), os.path.join(ROOT, "configs", "ppo", mlp), env_id


def msrl_one(args, work, mode, seed):
    run_dir = os.path.join(work, f"{mode}-seed{seed}")
    lstm, mlp, env_id = task_configs(args.task)
    config, extra = (lstm, []) if mode == "msrl-lstm" else (mlp, ["--set", f"env.id={env_id}"])
    wall, _ = run(msrl_cmd() + ["train", config, "--seed", str(seed), "--run-dir", run_dir, "--quiet",
                                "--total-timesteps", str(args.total_timesteps), "--set", "eval.freq=0",
                                "--set", f"eval.episodes={args.eval_episodes}"] + extra, f"{mode} seed {seed}")
    s = summary_of(run_dir)
    return {"wall_s": wall, "return": s["final_eval"]["mean_return"], "params_sha256": s["params_sha256"],
            "update_s": s["phase_seconds"]["update"], "acting_s": s["phase_seconds"]["acting"]}


def sb3_one(args, mode, seed):
    threads = 1 if mode == "sb3c-lstm-1" else 0
    cmd = [sys.executable, os.path.join(HERE, "ppo_vs_sb3.py"), "--worker", "sb3", "--threads", str(threads),
           "--config", task_configs(args.task)[0], "--seed", str(seed), "--total-timesteps", str(args.total_timesteps),
           "--eval-episodes", str(args.eval_episodes)]
    wall, out = run(cmd, f"{mode} seed {seed}")
    res = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    return {"wall_s": wall, "return": res["mean_return"], "threads": res["threads"]}


def one_run(job):
    args, work, mode, seed = job
    return msrl_one(args, work, mode, seed) if mode.startswith("msrl") else sb3_one(args, mode, seed)


def returns_text(runs, sep):
    return sep.join(f"{r['return']:.1f}" for r in runs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=sorted(TASKS), default="cartpole")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--total-timesteps", type=int, default=100000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--parallel", type=int, default=2, help="training processes at a time")
    p.add_argument("--json", metavar="OUT", help="write the results here")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="recurrent-vs-sb3-")
    results = {}
    for mode in args.modes:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.parallel) as pool:
            runs = list(pool.map(one_run, [(args, work, mode, s) for s in args.seeds]))
        results[mode] = {"study_wall_s": time.perf_counter() - t0, "runs": runs}
        print(f"{mode:18s} {results[mode]['study_wall_s']:8.1f} s   returns {returns_text(runs, ' ')}", flush=True)
        if args.json:  # after every mode: a long study cut short keeps the modes it finished
            with open(args.json, "w") as fh:
                json.dump({"task": args.task, "seeds": args.seeds, "total_timesteps": args.total_timesteps,
                           "parallel": args.parallel, "date": time.strftime("%Y-%m-%d %H:%M"), "results": results},
                          fh, indent=2)
    print(f"\n| mode | study wall (s) | per run (s, median) | returns (seeds {' '.join(map(str, args.seeds))}) |")
    print("| --- | --- | --- | --- |")
    for mode, r in results.items():
        walls = sorted(x["wall_s"] for x in r["runs"])
        print(f"| {mode} | {r['study_wall_s']:.1f} | {walls[len(walls) // 2]:.1f} | "
              f"{returns_text(r['runs'], ', ')} |")


if __name__ == "__main__":
    main()
