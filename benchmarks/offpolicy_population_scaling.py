"""How a SAC or TD3 population's gradient step scales with K: one graph call of K members (the
gradient step and the next exploration action, as the training loop calls it with train_freq 1)
against one member's own call, side by side in one process.

    python benchmarks/offpolicy_population_scaling.py                      # K = 1 2 4 8 16, SAC Pendulum-v1
    python benchmarks/offpolicy_population_scaling.py --config configs/td3/Pendulum-v1.yaml --ks 1 5

For each K: K members of the config (seeds 0..K-1) in one population, each replay buffer filled
with 1,000 random transitions. Each round times R population steps next to R steps of member 0
alone (its own fused SAC step / TD3 full step, the single run's cell), alternating which goes
first; medians of the paired ratios. ``member-steps per single step`` = K / (population step /
single step): how many members' gradient steps one population call does in the time of one.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("GLOG_v", "3")


def build(config, k):
    import numpy as np

    from msrl_consistent.config import load_config
    from msrl_consistent.registry import get

    cfg = load_config(config, ["seed=0"])
    every = ["algo.policy_delay=1"] if cfg.algorithm == "td3" else []  # TD3: every step the full one (with the actor)
    members = [get(cfg.algorithm)(load_config(config, [f"seed={s}"] + every)) for s in range(k)]
    rng = np.random.default_rng(0)
    d, a = members[0].spec.obs_dim, members[0].spec.n_actions
    for m in members:
        buf = m.make_buffer(1)
        for _ in range(1000):
            buf.add(rng.standard_normal((1, d)).astype(np.float32), rng.standard_normal((1, d)).astype(np.float32),
                    rng.uniform(-1, 1, (1, a)).astype(np.float32), rng.standard_normal(1), np.zeros(1, bool),
                    np.zeros(1, bool))
    population = get(cfg.algorithm).population(members, [f"member{s}" for s in range(k)], "population")
    return population, rng.standard_normal((k, 1, d)).astype(np.float32)


def timed(fn, reps):
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join("configs", "sac", "Pendulum-v1.yaml"))
    p.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=20, help="steps per timing")
    args = p.parse_args()
    print("| K | population step (ms) | one member's step (ms) | population / one member's | member-steps per single step |")
    print("| --- | --- | --- | --- | --- |")
    for k in args.ks:
        pop, obs = build(args.config, k)
        m0 = pop.members[0]
        population = lambda pop=pop, obs=obs: pop.rounds.train(1, obs)  # noqa: E731
        single = lambda m0=m0, obs=obs: m0.train(1, act_obs=obs[0])  # noqa: E731
        population()
        single()  # compile both
        ratios, pops, ones = [], [], []
        for r in range(args.rounds):
            if r % 2:
                one, mine = timed(single, args.reps), timed(population, args.reps)
            else:
                mine, one = timed(population, args.reps), timed(single, args.reps)
            ratios.append(mine / one)
            pops.append(mine)
            ones.append(one)
        ratio = statistics.median(ratios)
        print(f"| {k} | {statistics.median(pops) * 1e3:.2f} | {statistics.median(ones) * 1e3:.2f} | {ratio:.2f} | "
              f"{k / ratio:.2f} |", flush=True)


if __name__ == "__main__":
    main()
