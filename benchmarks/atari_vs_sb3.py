"""PPO on Atari Breakout: msrl (configs/ppo/Breakout-v5.yaml) against SB3's CnnPolicy, same
RL-Zoo values, same agent-step budget, SB3 at both torch thread settings; steps/s and the
episode returns seen during training (from msrl's metrics.jsonl and SB3's Monitor).

    pip install -e ".[atari,bench]" opencv-python-headless   # SB3's AtariWrapper needs OpenCV
    python benchmarks/atari_vs_sb3.py --total-timesteps 4096 [--json FILE] [--plot FILE.png]

Both sides consume 4 ALE frames per agent step: msrl runs ALE/Breakout-v5 (the ALE skips 4
frames) with the raw 210x160x3 frame as the policy input (grayscale, 84x84 area resize and
/255 in the cell, 4 frames stacked by deploy.FrameStack); SB3 runs ALE/Breakout-v5 with
frameskip=1 under its AtariWrapper (max-pooled skip of 4, 84x84 gray by OpenCV, no-op starts,
FIRE reset, life-loss episode ends, clipped rewards) and VecFrameStack(4), as RL-Zoo does.
Each side is its own process, timed from outside (start-up, imports, compilation included).
    python benchmarks/atari_vs_sb3.py --worker sb3 --threads 1 --total-timesteps N --out FILE
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
CONFIG = os.path.join(ROOT, "configs", "ppo", "Breakout-v5.yaml")


def sb3_worker(args):
    import ale_py
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    env = VecFrameStack(make_atari_env("ALE/Breakout-v5", n_envs=8, seed=0, env_kwargs={"frameskip": 1}), 4)

    def lin(v):
        return lambda remaining: remaining * v
    model = PPO("CnnPolicy", env, n_steps=128, batch_size=256, n_epochs=4, learning_rate=lin(2.5e-4),
                clip_range=lin(0.1), ent_coef=0.01, vf_coef=0.5, seed=0, device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(args.total_timesteps)
    learn_s = time.perf_counter() - t0
    returns = [float(e["r"]) for e in model.ep_info_buffer]
    with open(args.out, "w") as f:
        json.dump({"learn_s": learn_s, "steps": int(model.num_timesteps), "threads": torch.get_num_threads(),
                   "episode_returns_last_100": returns}, f)


def run(cmd, env=None):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stderr[-2000:]}")
    return wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total-timesteps", type=int, default=4096)
    ap.add_argument("--json")
    ap.add_argument("--plot")
    ap.add_argument("--worker", choices=["sb3"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out")
    ap.add_argument("--sides", nargs="+", default=["sb3", "msrl"], choices=["sb3", "msrl"],
                    help="which sides to run (msrl's CPU convolutions are ~300x slower than torch's here)")
    a = ap.parse_args()
    if a.worker:
        return sb3_worker(a)
    work = tempfile.mkdtemp(prefix="msrl-atari-")
    env = dict(os.environ, GLOG_v="3")
    rows = []
    for threads in ((1, 0) if "sb3" in a.sides else ()):
        out = os.path.join(work, f"sb3-{threads}.json")
        wall = run([sys.executable, __file__, "--worker", "sb3", "--threads", str(threads), "--total-timesteps",
                    str(a.total_timesteps), "--out", out], env)
        with open(out) as f:
            r = json.load(f)
        rows.append({"side": f"sb3 CnnPolicy, torch threads {r['threads']}", "steps": r["steps"], "wall_s": wall,
                     "learn_s": r["learn_s"], "steps_per_s_wall": r["steps"] / wall,
                     "episode_returns": r["episode_returns_last_100"]})
    run_dir = os.path.join(work, "msrl")
    cmd = ["msrl", "train", CONFIG, "--run-dir", run_dir, "--total-timesteps", str(a.total_timesteps), "--quiet",
           "--set", "eval.freq=0", "--set", "eval.episodes=1"]
    wall = run(cmd, env) if "msrl" in a.sides else None
    if wall is not None:
        rows.append(msrl_row(run_dir, wall))
    report(rows, a)


def msrl_row(run_dir, wall):
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    episodes = []  # msrl logs the mean of the recent training episodes once per iteration
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m.get("kind") == "train" and m.get("recent_mean_return") is not None:
                episodes.append(float(m["recent_mean_return"]))
    return {"side": "msrl (MindSpore, in-cell preprocessing)", "steps": s["num_timesteps"], "wall_s": wall,
            "learn_s": s.get("wall_time_s"), "steps_per_s_wall": s["num_timesteps"] / wall, "episode_returns": episodes}


def report(rows, a):
    for r in rows:
        ret = r["episode_returns"]
        mean = sum(ret) / len(ret) if ret else float("nan")
        print(f"{r['side']:44s} {r['steps']:7d} steps  {r['wall_s']:7.1f} s wall  {r['steps_per_s_wall']:7.1f} steps/s"
              f"  {len(ret)} returns (sb3: episodes; msrl: per-iteration means), mean {mean:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for r in rows:
            if r["episode_returns"]:
                ax.plot(range(1, len(r["episode_returns"]) + 1), r["episode_returns"], label=r["side"])
        ax.set_xlabel("training episode")
        ax.set_ylabel("episode return")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)


if __name__ == "__main__":
    main()
