"""Cost of one SAC / TD3 gradient step, msrl against Stable-Baselines3, interleaved in one process.

    pip install -e ".[bench]"
    python benchmarks/offpolicy_step_cost.py --algos sac td3 --reps 5

Both frameworks get the same replay-buffer size (3,000 Pendulum transitions), batch 256 and
networks (configs/<algo>/Pendulum-v1.yaml; SB3 with 1 torch thread). Each repetition times, one
after the other: msrl ``train(N)`` (N gradient steps back to back, the host preparing the next
batch while a graph runs), msrl per environment step (``train(1, act_obs)``: one update and the
next action in one graph call, then a Pendulum step, as the training loop does with train_freq 1),
and SB3 ``train(gradient_steps=N)``. Interleaving puts the three under the same machine load;
the medians and the ratio are printed as a markdown table.
"""
import argparse
import os
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def fill(buf, env_rng, n=3000):
    for i in range(n):
        buf.add(env_rng.normal(size=(1, 3)), env_rng.normal(size=(1, 3)), env_rng.uniform(-1, 1, (1, 1)),
                env_rng.normal(size=1), [False], [i % 200 == 199])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--algos", nargs="+", default=["sac", "td3"])
    p.add_argument("--steps", type=int, default=100, help="gradient steps per timing")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()

    os.environ.setdefault("GLOG_v", "3")
    import torch
    default_threads = torch.get_num_threads()
    import gymnasium as gym
    import yaml
    from stable_baselines3 import SAC, TD3

    from msrl_consistent import registry
    from msrl_consistent.config import load_config
    from msrl_consistent.determinism import configure_mindspore
    from msrl_consistent.envs import make_vec_env, seed_vec_env, step_transitions

    configure_mindspore("CPU")
    rows = []
    for name in args.algos:
        path = os.path.join(ROOT, "configs", name, "Pendulum-v1.yaml")
        cfg = load_config(path, ["log.tensorboard=false"])
        algo = registry.get(name)(cfg)
        fill(algo.make_buffer(1), np.random.default_rng(1))
        y = yaml.safe_load(open(path))
        a = y["algo"]
        env = gym.make("Pendulum-v1")
        kw = dict(learning_rate=float(a["learning_rate"]), learning_starts=100, batch_size=int(a["batch_size"]),
                  tau=float(a["tau"]), gamma=float(a["gamma"]), policy_kwargs={"net_arch": y["policy"]["net_arch"]},
                  device="cpu", seed=0, verbose=0)
        model = SAC("MlpPolicy", env, **kw) if name == "sac" else TD3("MlpPolicy", env, **kw)
        model.learn(3000)  # SB3's buffer: 3,000 transitions as well
        venv = make_vec_env(cfg.env)
        obs = seed_vec_env(venv, 0)
        _, act = algo.train(2, act_obs=obs)  # compile both graphs
        algo.train(2)
        model.train(gradient_steps=2, batch_size=int(a["batch_size"]))
        n = args.steps
        t = {"msrl train(N)": [], "msrl per env step": [], "SB3 train(N)": [], "SB3 default threads": []}
        for _ in range(args.reps):
            t0 = time.perf_counter()
            algo.train(n)
            t["msrl train(N)"].append((time.perf_counter() - t0) / n)
            t0 = time.perf_counter()
            for _ in range(n):
                nobs, r, te, tr, real, _ = step_transitions(venv, act[0])
                algo.buffer.add(obs, real, act[1], r, te, tr)
                obs = nobs
                _, act = algo.train(1, act_obs=obs)
            t["msrl per env step"].append((time.perf_counter() - t0) / n)
            for key, threads in (("SB3 train(N)", 1), ("SB3 default threads", default_threads)):
                torch.set_num_threads(threads)
                t0 = time.perf_counter()
                model.train(gradient_steps=n, batch_size=int(a["batch_size"]))
                t[key].append((time.perf_counter() - t0) / n)
        med = {k: float(np.median(v)) * 1e3 for k, v in t.items()}
        rows.append((name, med))
        venv.close()
    print(f"\n| algo | msrl train(N), ms/step | msrl per env step, ms | SB3 1 thread, ms/step | SB3 {default_threads} "
          "threads, ms/step | faster SB3 / msrl train(N) | faster SB3 / msrl per env step |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, m in rows:
        best = min(m["SB3 train(N)"], m["SB3 default threads"])
        print(f"| {name} | {m['msrl train(N)']:.2f} | {m['msrl per env step']:.2f} | {m['SB3 train(N)']:.2f} | "
              f"{m['SB3 default threads']:.2f} | {best / m['msrl train(N)']:.2f} | {best / m['msrl per env step']:.2f} |")


if __name__ == "__main__":
    main()
