"""PPO on Atari Breakout: msrl (configs/ppo/Breakout-v5.yaml) against SB3's CnnPolicy, same
RL-Zoo values, same agent-step budget, SB3 at both torch thread settings; steps/s and the
episode returns seen during training (from msrl's metrics.jsonl and SB3's Monitor).

    pip install -e ".[atari,bench]" "opencv-python-headless<4.11"   # SB3's AtariWrapper needs OpenCV; <4.11 keeps numpy 1.x
    python benchmarks/atari_vs_sb3.py --total-timesteps 4096 [--pipelines sequential overlap] [--json FILE] [--plot FILE.png]
    python benchmarks/atari_vs_sb3.py --total-timesteps 1000000 --sb3-threads 0 --json FILE --plot FILE.png   # learning curve
    python benchmarks/atari_vs_sb3.py --sides --load A.json B.json --plot FILE.png   # report and plot earlier runs' rows

Both sides consume 4 ALE frames per agent step: msrl runs ALE/Breakout-v5 (the ALE skips 4
frames) with the raw 210x160x3 frame as the policy input (grayscale, 84x84 area resize and
/255 in the cell, 4 frames stacked by deploy.FrameStack); SB3 runs ALE/Breakout-v5 with
frameskip=1 under its AtariWrapper (max-pooled skip of 4, 84x84 gray by OpenCV, no-op starts,
FIRE reset, life-loss episode ends, clipped rewards) and VecFrameStack(4), as RL-Zoo does.
Each side is its own process, timed from outside (start-up, imports, compilation included), one
after the other, msrl's first (a run from a checkout takes the checkout's code as it starts).
Both curves are the mean return of the last <= 100 whole games with their unclipped score.
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
    from stable_baselines3.common.callbacks import BaseCallback
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

    class Curve(BaseCallback):
        """(timesteps, mean return of the last <= 100 episodes) at each rollout end: SB3's
        rollout/ep_rew_mean, msrl's recent_mean_return (the Monitor sits under the AtariWrapper,
        so an episode is a whole game with its raw score, as msrl's GameMonitor reports them)."""
        points = []

        def _on_step(self):
            return True

        def _on_rollout_end(self):
            if self.model.ep_info_buffer:
                self.points.append([int(self.num_timesteps),
                                    float(sum(e["r"] for e in self.model.ep_info_buffer) / len(self.model.ep_info_buffer))])

    t0 = time.perf_counter()
    model.learn(args.total_timesteps, callback=Curve())
    learn_s = time.perf_counter() - t0
    returns = [float(e["r"]) for e in model.ep_info_buffer]
    with open(args.out, "w") as f:
        json.dump({"learn_s": learn_s, "steps": int(model.num_timesteps), "threads": torch.get_num_threads(),
                   "episode_returns_last_100": returns, "curve": Curve.points}, f)


def run(cmd, env=None):
    """(whole-process wall time in s, peak resident memory in GiB) of one child process."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} exited {code}\n{err.read().decode(errors='replace')[-2000:]}")
    return wall, usage.ru_maxrss / 2**20


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total-timesteps", type=int, default=4096)
    ap.add_argument("--json")
    ap.add_argument("--plot")
    ap.add_argument("--worker", choices=["sb3"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out")
    ap.add_argument("--sides", nargs="*", default=["sb3", "msrl"], choices=["sb3", "msrl"],
                    help="which sides to run (none: only --load's rows)")
    ap.add_argument("--load", nargs="+", default=[], metavar="JSON",
                    help="rows of earlier runs (their --json files), reported and plotted before this run's")
    ap.add_argument("--sb3-threads", nargs="+", type=int, default=[1, 0],
                    help="SB3's torch thread settings (0: torch's default, 2 on a 2-core machine)")
    ap.add_argument("--pipelines", nargs="+", default=["sequential"], choices=["sequential", "overlap"],
                    help="msrl's env.pipeline settings (one msrl run each)")
    a = ap.parse_args()
    if a.worker:
        return sb3_worker(a)
    work = tempfile.mkdtemp(prefix="msrl-atari-")
    env = dict(os.environ, GLOG_v="3")
    rows = []
    for path in a.load:
        with open(path) as f:
            rows += json.load(f)
    for pipeline in (a.pipelines if "msrl" in a.sides else ()):
        run_dir = os.path.join(work, f"msrl-{pipeline}")
        # this interpreter's msrl (the one with the atari extra), not whichever `msrl` is on PATH
        cmd = [sys.executable, "-m", "msrl_consistent", "train", CONFIG, "--run-dir", run_dir,
               "--total-timesteps", str(a.total_timesteps), "--quiet",
               "--set", "eval.freq=0", "--set", "eval.episodes=1", "--set", f"env.pipeline={pipeline}"]
        wall, rss = run(cmd, env)
        rows.append(msrl_row(run_dir, wall, rss, pipeline))
    for threads in (a.sb3_threads if "sb3" in a.sides else ()):
        out = os.path.join(work, f"sb3-{threads}.json")
        wall, rss = run([sys.executable, __file__, "--worker", "sb3", "--threads", str(threads), "--total-timesteps",
                         str(a.total_timesteps), "--out", out], env)
        with open(out) as f:
            r = json.load(f)
        rows.append({"side": f"sb3 CnnPolicy, torch threads {r['threads']}", "steps": r["steps"], "wall_s": wall,
                     "learn_s": r["learn_s"], "steps_per_s_wall": r["steps"] / wall, "peak_rss_gib": rss,
                     "curve": r["curve"], "episode_returns": r["episode_returns_last_100"]})
    report(rows, a)


def msrl_row(run_dir, wall, rss, pipeline):
    """msrl's row. Its run ends with one deterministic evaluation episode (eval.episodes >= 1),
    which SB3's worker does not have: its duration (the eval record's time minus the last
    training record's) is subtracted from the wall time and reported apart. (An untrained
    deterministic Breakout policy may never press FIRE: that episode then lasts the ALE's
    108,000-frame limit, ~100 s here.)"""
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    curve, last_train, eval_end = [], 0.0, None
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m.get("kind") == "train":
                last_train = float(m["time"])
                if m.get("recent_mean_return") is not None:
                    curve.append([int(m["step"]), float(m["recent_mean_return"])])
            elif m.get("kind") == "eval":
                eval_end = float(m["time"])
    eval_s = 0.0 if eval_end is None else eval_end - last_train
    wall_train = wall - eval_s
    return {"side": f"msrl (MindSpore, env.pipeline {pipeline})", "params_sha256": s["params_sha256"],
            "steps": s["num_timesteps"], "wall_s": wall_train,
            "final_eval_s": eval_s, "learn_s": s.get("wall_time_s"), "steps_per_s_wall": s["num_timesteps"] / wall_train,
            "peak_rss_gib": rss, "startup_s": s.get("startup_s"), "first_update_s": s.get("first_update_s"),
            "phase_seconds": s.get("phase_seconds"), "curve": curve,
            "episode_returns": [c[1] for c in curve]}


def report(rows, a):
    for r in rows:
        last = r["curve"][-1][1] if r["curve"] else float("nan")
        print(f"{r['side']:44s} {r['steps']:7d} steps  {r['wall_s']:7.1f} s wall  {r['steps_per_s_wall']:6.1f} steps/s"
              f"  peak RSS {r['peak_rss_gib']:.1f} GiB  last mean return (last <= 100 episodes) {last:.2f}")
        if "final_eval_s" in r:
            print(f"{'':44s} params_sha256 {r['params_sha256'][:8]}, final evaluation, not counted: "
                  f"{r['final_eval_s']:.1f} s; start-up {r['startup_s']} s, "
                  f"first update (compiles) {r['first_update_s']} s, phases {r['phase_seconds']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6.5, 3.8))
        for r in rows:
            if r["curve"]:
                xs, ys = zip(*r["curve"])
                ax.plot(xs, ys, label=f"{r['side']} ({r['steps_per_s_wall']:.0f} steps/s)")
        ax.set_xlabel("agent steps (4 frames each)")
        ax.set_ylabel("mean return, last <= 100 games")
        ax.set_title("PPO, ALE/Breakout-v5, RL-Zoo values")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)


if __name__ == "__main__":
    main()
