"""How a population's graph calls scale with K: one update phase and one acting call of K members
against one member's own calls, side by side in one process.

    python benchmarks/population_scaling.py                       # K = 1 2 4 8 16, CartPole-v1
    python benchmarks/population_scaling.py --ks 1 5 --config configs/ppo/Pendulum-v1.yaml

For each K: K PPO members of the config (seeds 0..K-1) in one population; the update phase runs
on synthetic rollouts of the config's sizes (every epoch and minibatch of one rollout), the acting
call on random observations. Each round times the population's call next to one member's own
call (its PPOUpdatePhase / its rollout cell), alternating which goes first; medians of the
paired ratios. ``member-steps per single step`` = K / (population call / single call): how many
members' work one population call does in the time of one member's.
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("GLOG_v", "3")


def build(config, k):
    from msrl_consistent.algorithms.ppo.population import PPOPopulation
    from msrl_consistent.config import load_config
    from msrl_consistent.registry import get

    members = [get("ppo")(load_config(config, [f"seed={s}"])) for s in range(k)]
    return PPOPopulation(members, [f"member{s}" for s in range(k)], "population")


def inputs(pop, rng):
    import mindspore as ms
    import numpy as np
    from mindspore import Tensor

    from msrl_consistent.algorithms.ppo.update import minibatch_indices

    m = pop.members[0]
    c, spec, k, n = pop.c, m.spec, pop.k, pop.rollout
    obs = rng.standard_normal((k * n, spec.obs_dim)).astype(np.float32)
    if spec.discrete:
        act = rng.integers(0, spec.n_actions, (k * n,) + spec.action_shape).astype(np.int32)
    else:
        act = rng.standard_normal((k * n,) + spec.action_shape).astype(np.float32)
    vec = [rng.standard_normal(k * n).astype(np.float32) for _ in range(4)]
    idx = [minibatch_indices(np.random.default_rng(s), n, c.batch_size, c.n_epochs) for s in range(k)]
    full = np.concatenate([f + s * n for s, (f, _) in enumerate(idx)], 1)
    tail = np.concatenate([t + s * n for s, (_, t) in enumerate(idx)], 1)
    d = spec.obs_dim
    rate = Tensor(np.full(k, c.learning_rate, np.float32)) if pop.per_member_rate else Tensor(c.learning_rate, ms.float32)
    phase = (obs, act, vec[0], vec[1], vec[2], vec[3], full, tail, np.zeros((k, 1, d), np.float32),
             np.ones((k, 1, d), np.float32), rate, np.full((k, 1), c.clip_range, np.float32), np.zeros((k, 1), np.float32))
    f32 = lambda x: Tensor(x, ms.float32)  # noqa: E731
    single = (idx[0][0], idx[0][1], f32(c.learning_rate), f32(c.clip_range), f32(0.0), f32(float("inf")),
              obs[:n], act[:n], vec[0][:n], vec[1][:n], vec[2][:n], vec[3][:n])
    n_envs = m.cfg.env.n_envs
    act_obs = rng.standard_normal((k, n_envs, d)).astype(np.float32)
    noise = np.stack([m.distribution.noise(rng, n_envs) for _ in range(k)])
    return phase, single, act_obs, noise


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(args, k):
    """(update phase ratio, acting call ratio) of a K-member population against one member."""
    import numpy as np
    from mindspore import Tensor

    from msrl_consistent.algorithms.on_policy import PackedRollout
    from msrl_consistent.fastcall import FastCall

    pop = build(args.config, k)
    phase, single, act_obs, noise = inputs(pop, np.random.default_rng(0))
    m = pop.members[0]
    own_act = FastCall(PackedRollout(m.rollout_cell))

    def tensors(xs):
        return [Tensor(x) if isinstance(x, np.ndarray) else x for x in xs]

    def run_pop():
        pop._phase_fn(*tensors(phase)).asnumpy()

    def run_one():
        m._phase_fn(*tensors(single))[0].asnumpy()

    def act_pop():
        for _ in range(args.acting_calls):
            pop._rollout_fn(Tensor(act_obs), Tensor(noise)).asnumpy()

    def act_one():
        for _ in range(args.acting_calls):
            own_act(Tensor(act_obs[0]), Tensor(noise[0])).asnumpy()

    for f in (run_pop, run_one, act_pop, act_one):
        f()  # compile
    upd, act = [], []
    for r in range(args.rounds):
        for a, b, out in ((run_pop, run_one, upd), (act_pop, act_one, act)):
            if r % 2:
                tb, ta = timed(b), timed(a)
            else:
                ta, tb = timed(a), timed(b)
            out.append(ta / tb)
    return statistics.median(upd), statistics.median(act)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join("configs", "ppo", "CartPole-v1.yaml"))
    p.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--acting-calls", type=int, default=200)
    args = p.parse_args()
    rows = []
    for k in args.ks:
        u, a = measure(args, k)
        rows.append((k, u, k / u, a, k / a))
        print(f"K={k}: update {u:.2f}x, acting {a:.2f}x", file=sys.stderr, flush=True)
    print("| K | update phase / one member's | member-steps per single step (update) | acting call / one member's | "
          "member-steps per single call (acting) |")
    print("| --- | --- | --- | --- | --- |")
    for k, u, ue, a, ae in rows:
        print(f"| {k} | {u:.2f} | {ue:.2f} | {a:.2f} | {ae:.2f} |")


if __name__ == "__main__":
    main()
