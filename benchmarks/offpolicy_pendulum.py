"""msrl vs Stable-Baselines3, SAC, TD3 and DQN, same hyperparameters, side by side in one run.

    pip install -e ".[bench]"     # torch 2.13.0 (CPU wheel on this disk) + stable-baselines3
    python benchmarks/offpolicy_pendulum.py --env Pendulum-v1 --steps 20000 --seeds 0
    python benchmarks/offpolicy_pendulum.py --env HalfCheetah-v5 --steps 50000 --seeds 0
    python benchmarks/offpolicy_pendulum.py --steps 5000 --learning-starts 100    # the short comparison
    python benchmarks/offpolicy_pendulum.py --algos dqn --env CartPole-v1 --steps 50000 --seeds 0 1 2 3 4
    python benchmarks/offpolicy_pendulum.py --algos sac --steps 5000 --n-envs 2 --pipelines sequential overlap

Each training runs in its own process, one after the other; SB3 once with 1 torch thread and
once with torch's default thread count (--sb3-threads 1 0), and the ratio is quoted against
the faster of the two. ``--n-envs N`` trains N envs on both sides (SB3: a DummyVecEnv of N;
train_freq counts vector steps on both), ``--pipelines`` runs msrl once per ``env.pipeline``
(the overlap needs N >= 2). Wall time is the training process's whole life (imports and graph
compilation included);
steps/s is steps / training time as each framework reports it. The eval return is the mean
over 10 deterministic episodes seeded 1000..1009, the same seeds for both frameworks. The
hyperparameters are read from msrl's configs/<algo>/<env>.yaml and given to SB3.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def sb3_worker(algo: str, env_id: str, steps: int, seed: int, out: str, threads: int, learning_starts: int,
               config: str = None, n_envs: int = 1) -> None:
    import gymnasium as gym
    import numpy as np
    import torch
    import yaml

    if threads > 0:
        torch.set_num_threads(threads)
    from stable_baselines3 import DQN, SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise

    cfg = yaml.safe_load(open(config or os.path.join(ROOT, "configs", algo, f"{env_id}.yaml")))
    a = cfg["algo"]
    env = gym.make(env_id)
    if n_envs > 1:
        from stable_baselines3.common.env_util import make_vec_env
        train_env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    else:
        train_env = env
    net = cfg["policy"]["net_arch"]
    starts = int(a["learning_starts"]) if learning_starts < 0 else learning_starts
    common = dict(learning_rate=float(a["learning_rate"]), buffer_size=int(a["buffer_size"]),
                  learning_starts=starts, batch_size=int(a["batch_size"]), tau=float(a["tau"]),
                  gamma=float(a["gamma"]), seed=seed, verbose=0, device="cpu",
                  policy_kwargs={"net_arch": net})
    if algo == "dqn":
        model = DQN("MlpPolicy", train_env, train_freq=int(a["train_freq"]), gradient_steps=int(a["gradient_steps"]),
                    target_update_interval=int(a["target_update_interval"]),
                    exploration_fraction=float(a["exploration_fraction"]),
                    exploration_initial_eps=float(a["exploration_initial_eps"]),
                    exploration_final_eps=float(a["exploration_final_eps"]),
                    max_grad_norm=float(a["max_grad_norm"]), **common)
    elif algo == "sac":
        model = SAC("MlpPolicy", train_env, train_freq=int(a["train_freq"]), gradient_steps=int(a["gradient_steps"]),
                    ent_coef="auto" if a.get("auto_ent_coef", True) else float(a.get("init_ent_coef", 1.0)), **common)
    else:
        n = env.action_space.shape[0]
        half = (env.action_space.high - env.action_space.low) / 2
        noise = NormalActionNoise(np.zeros(n), float(a["action_noise_sigma"]) * half * np.ones(n))
        # msrl's train_freq / gradient_steps count steps; RL-Zoo's Pendulum TD3 trains once per
        # episode with as many gradient steps as collected, which is what the msrl config encodes
        episodic = env_id.startswith("Pendulum")
        model = TD3("MlpPolicy", train_env, action_noise=noise, policy_delay=int(a["policy_delay"]),
                    target_policy_noise=float(a["target_policy_noise"]), target_noise_clip=float(a["target_noise_clip"]),
                    train_freq=(1, "episode") if episodic else int(a["train_freq"]),
                    gradient_steps=-1 if episodic else int(a["gradient_steps"]), **common)
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps)
    train_s = time.perf_counter() - t0
    returns = []
    for i in range(10):
        obs, _ = env.reset(seed=1000 + i)
        done, ret = False, 0.0
        while not done:
            act, _ = model.predict(obs, deterministic=True)
            obs, r, term, trunc, _ = env.step(act)
            ret += float(r)
            done = term or trunc
        returns.append(ret)
    json.dump({"train_s": train_s, "steps_per_s": steps / train_s, "mean_return": float(np.mean(returns)),
               "returns": returns, "threads": torch.get_num_threads()}, open(out, "w"))


def run_msrl(algo, env_id, steps, seed, work, learning_starts, n_envs=1, pipeline="sequential"):
    run = os.path.join(work, f"msrl-{algo}-{env_id}-{seed}-{pipeline}")
    cmd = [sys.executable, "-m", "msrl_consistent", "train", os.path.join(ROOT, "configs", algo, f"{env_id}.yaml"),
           "--seed", str(seed), "--total-timesteps", str(steps), "--run-dir", run, "--quiet", "--set", "eval.freq=0",
           "--set", "eval.episodes=1"]
    if learning_starts >= 0:
        cmd += ["--set", f"algo.learning_starts={learning_starts}"]
    if n_envs > 1:
        cmd += ["--set", f"env.n_envs={n_envs}", "--set", f"env.pipeline={pipeline}"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=dict(os.environ, GLOG_v="3"))
    wall = time.perf_counter() - t0
    summary = json.load(open(os.path.join(run, "summary.json")))
    ev = subprocess.run([sys.executable, "-m", "msrl_consistent", "eval", run, "--episodes", "10", "--seed", "1000",
                         "--json"], check=True, capture_output=True, text=True, env=dict(os.environ, GLOG_v="3"))
    ev = json.loads(ev.stdout)
    return {"framework": "msrl" if n_envs == 1 else f"msrl {pipeline}", "algo": algo, "seed": seed, "wall_s": wall,
            "steps_per_s": summary["steps_per_second"], "mean_return": ev["mean_return"],
            "params_sha256": summary["params_sha256"], "phase_seconds": summary["phase_seconds"]}


def run_sb3(algo, env_id, steps, seed, work, threads, learning_starts, n_envs=1):
    out = os.path.join(work, f"sb3-{algo}-{env_id}-{seed}-t{threads}.json")
    env = dict(os.environ, OMP_NUM_THREADS="1") if threads == 1 else dict(os.environ)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--sb3-worker", algo, env_id, str(steps), str(seed), out, str(threads),
                    str(learning_starts), "", str(n_envs)], check=True, env=env)
    wall = time.perf_counter() - t0
    r = json.load(open(out))
    return {"framework": f"sb3 ({r['threads']} thread{'s' if r['threads'] > 1 else ''})", "algo": algo, "seed": seed,
            "wall_s": wall, "steps_per_s": r["steps_per_s"], "mean_return": r["mean_return"]}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--sb3-worker":
        algo, env_id, steps, seed, out, threads, learning_starts = sys.argv[2:9]
        config = sys.argv[9] if len(sys.argv) > 9 and sys.argv[9] else None  # a copy with other values (population_vs_sb3's sweeps)
        n_envs = int(sys.argv[10]) if len(sys.argv) > 10 else 1
        return sb3_worker(algo, env_id, int(steps), int(seed), out, int(threads), int(learning_starts), config, n_envs)
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="Pendulum-v1")
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--algos", nargs="+", default=["sac", "td3"])
    p.add_argument("--sb3-threads", type=int, nargs="+", default=[1, 0],
                   help="torch thread counts for SB3 (0: torch's default)")
    p.add_argument("--learning-starts", type=int, default=-1, help="override learning_starts on both sides")
    p.add_argument("--n-envs", type=int, default=1, help="envs trained side by side (both frameworks)")
    p.add_argument("--pipelines", nargs="+", default=["sequential"], choices=["sequential", "overlap"],
                   help="msrl's env.pipeline values, one msrl run each (overlap needs --n-envs >= 2)")
    p.add_argument("--workdir")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()
    if "overlap" in args.pipelines and args.n_envs < 2:
        p.error("--pipelines overlap needs --n-envs 2 or more (the overlap steps one half of the envs while the "
                "other acts)")
    work = args.workdir or tempfile.mkdtemp(prefix="msrl-offpolicy-")
    rows = []
    for algo in args.algos:
        for seed in args.seeds:
            for side in list(args.pipelines) + list(args.sb3_threads):  # a pipeline: msrl; a thread count: SB3
                if isinstance(side, str):
                    rows.append(run_msrl(algo, args.env, args.steps, seed, work, args.learning_starts, args.n_envs, side))
                else:
                    rows.append(run_sb3(algo, args.env, args.steps, seed, work, side, args.learning_starts, args.n_envs))
                print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"env": args.env, "steps": args.steps, "n_envs": args.n_envs, "rows": rows}, fh, indent=1)
    print(f"\n{args.env}, {args.steps} steps, {args.n_envs} env(s)\n")
    print("| algo | seed | framework | wall time (s) | steps/s | eval mean return (10 ep) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['algo']} | {r['seed']} | {r['framework']} | {r['wall_s']:.1f} | {r['steps_per_s']:.1f} | "
              f"{r['mean_return']:.1f} |")
    for algo in args.algos:
        for seed in args.seeds:
            sb3 = [r for r in rows if r["algo"] == algo and r["seed"] == seed and r["framework"].startswith("sb3")]
            best = min(sb3, key=lambda r: r["wall_s"])
            for m in (r for r in rows if r["algo"] == algo and r["seed"] == seed and r["framework"].startswith("msrl")):
                print(f"\n{algo} seed {seed}, {m['framework']}: faster SB3 setting {best['framework']}; msrl wall / "
                      f"SB3 wall {m['wall_s'] / best['wall_s']:.2f} (SB3 / msrl {best['wall_s'] / m['wall_s']:.2f}), "
                      f"steps/s ratio msrl/SB3 {m['steps_per_s'] / best['steps_per_s']:.2f}")


if __name__ == "__main__":
    main()
