"""PPO update-phase cost per minibatch and acting cost per vector step, paths interleaved in
one process (the same machine load for every path).

    python benchmarks/ppo_update_cost.py [--config configs/ppo/CartPole-v1.yaml] [--rounds 6]

Update: the fused phase (one graph call per rollout, PPOUpdatePhase) against the per-minibatch
loop (one graph call per minibatch, what data-parallel runs use), on one synthetic rollout of
the config's size, ms per minibatch (median over rounds; each round runs 3 phases per path).
Acting: the rollout cell through nn.Cell.__call__, through FastCall, and through FastCall with
its outputs packed into one matrix (what the training loop runs), ms per vector step (graph call
+ every output to NumPy). Then where that call's floor is: a graph of one kernel through the same
path (what any graph call costs), and the packed call when the host worked 0.3 ms or 1 ms
between calls (busy-waiting, untimed), as the training loop does while the environments step:
MindSpore's runtime threads fall idle between calls, and waking them is part of the call.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

os.environ.setdefault("GLOG_v", "3")

HERE = os.path.dirname(os.path.abspath(__file__))


def synthetic_rollout(algo):
    from msrl_consistent.buffers import RolloutBuffer

    cfg, c, spec = algo.cfg, algo.cfg.algo, algo.spec
    n = cfg.env.n_envs
    buf = RolloutBuffer(c.n_steps, n, spec.obs_dim, () if spec.discrete else (spec.n_actions,), spec.discrete)
    rng = np.random.default_rng(1)
    for _ in range(c.n_steps):
        obs = rng.normal(size=(n, spec.obs_dim)).astype(np.float32)
        if spec.discrete:
            a = rng.integers(0, spec.n_actions, n).astype(np.int32)
        else:
            a = rng.normal(size=(n, spec.n_actions)).astype(np.float32)
        buf.add(obs, a, (rng.normal(size=n) - 0.7).astype(np.float32), rng.normal(size=n).astype(np.float32),
                rng.normal(size=n).astype(np.float32), np.zeros(n, bool), np.zeros(n, bool))
    buf.compute(np.zeros(n, np.float32), c.gamma, c.gae_lambda)
    return buf


def acting_costs(fused, rounds: int) -> dict:
    """ms per vector step of each acting path, one list (a median per round) per path."""
    from mindspore import Tensor, nn

    from msrl_consistent.algorithms.on_policy import PackedRollout, unpack_rollout
    from msrl_consistent.fastcall import FastCall

    n = fused.cfg.env.n_envs
    obs = np.random.default_rng(2).normal(size=(n, fused.spec.obs_dim)).astype(np.float32)
    fast = FastCall(fused.rollout_cell)
    packed = FastCall(PackedRollout(fused.rollout_cell))
    act_shape = () if fused.spec.discrete else (fused.spec.n_actions,)

    def plain_step():
        return [o.asnumpy() for o in fused.rollout_cell(Tensor(obs), Tensor(fused.sample_noise(n)))]

    def fast_step():
        return [o.asnumpy() for o in fast(Tensor(obs), Tensor(fused.sample_noise(n)))]

    def packed_step():  # what the training loop does
        return unpack_rollout(packed(Tensor(obs), Tensor(fused.sample_noise(n))).asnumpy(), act_shape,
                              fused.spec.discrete)

    class OneKernel(nn.Cell):
        def construct(self, x, noise):
            return x * 2.0

    one = FastCall(OneKernel())

    def one_kernel_step():
        return one(Tensor(obs), Tensor(fused.sample_noise(n))).asnumpy()

    def busy(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    plain_step(), fast_step(), packed_step(), one_kernel_step()
    paths = (("Cell.__call__", plain_step, 0.0), ("FastCall", fast_step, 0.0),
             ("FastCall, one packed output (the loop's)", packed_step, 0.0),
             ("a graph of one kernel, FastCall (a call's floor)", one_kernel_step, 0.0),
             ("packed, 0.3 ms of host work between calls", packed_step, 3e-4),
             ("packed, 1 ms of host work between calls", packed_step, 1e-3))
    acting = {name: [] for name, _, _ in paths}
    for _ in range(rounds):
        for name, fn, gap in paths:
            times = []
            for _ in range(300):
                busy(gap)
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            acting[name].append(statistics.median(times) * 1e3)

    return acting


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join(os.path.dirname(HERE), "configs", "ppo", "CartPole-v1.yaml"))
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args()

    from msrl_consistent import registry
    from msrl_consistent.config import load_config

    cfg = load_config(args.config, ["log.tensorboard=false"])
    fused = registry.get("ppo")(cfg)
    loop = registry.get("ppo")(cfg)
    loop.fused = False
    buf = synthetic_rollout(fused)
    compile_s = {}
    for name, algo in (("fused", fused), ("per-minibatch", loop)):
        t0 = time.perf_counter()
        algo.train(buf)
        compile_s[name] = time.perf_counter() - t0
    update = {"fused": [], "per-minibatch": []}
    for _ in range(args.rounds):
        for name, algo in (("fused", fused), ("per-minibatch", loop)):
            n0, t0 = algo.n_updates, time.perf_counter()
            for _ in range(3):
                algo.train(buf)
            update[name].append((time.perf_counter() - t0) / (algo.n_updates - n0) * 1e3)

    acting = acting_costs(fused, args.rounds)

    c, n = cfg.algo, cfg.env.n_envs
    print(f"{os.path.relpath(args.config)}: rollout {c.n_steps} x {n} envs, batch {c.batch_size}, "
          f"{c.n_epochs} epochs; {args.rounds} interleaved rounds\n")
    print("| path | ms per minibatch (median) | range | first phase (compiles) s |")
    print("| --- | --- | --- | --- |")
    for name, v in update.items():
        print(f"| update, {name} | {statistics.median(v):.3f} | {min(v):.3f}-{max(v):.3f} | {compile_s[name]:.2f} |")
    print("\n| path | ms per vector step (median of per-round medians) | range |")
    print("| --- | --- | --- |")
    for name, v in acting.items():
        print(f"| acting, {name} | {statistics.median(v):.3f} | {min(v):.3f}-{max(v):.3f} |")


if __name__ == "__main__":
    main()
