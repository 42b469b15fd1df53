"""Recurrent PPO's update phase and acting call, timed in one process on random sequences.

    python benchmarks/recurrent_update_cost.py [--config configs/ppo/CartPoleNoVel-v1-lstm.yaml]

The config's whole update phase (``PPO._train_fused``: n_epochs x minibatches of env sequences,
one graph call) on random rollout arrays of its shapes: the first call (compilation included),
then the median of 5 calls, per phase and per minibatch; then the rollout graph call (packed
outputs, what the training loop runs), mean over 500 calls at the config's n_envs.
"""
import argparse
import os
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "ppo", "CartPoleNoVel-v1-lstm.yaml"))
    args = p.parse_args()
    from mindspore import Tensor

    from msrl_consistent import registry
    from msrl_consistent.algorithms.on_policy import PackedRollout
    from msrl_consistent.config import load_config
    from msrl_consistent.fastcall import FastCall

    cfg = load_config(args.config)
    algo = registry.get("ppo")(cfg)
    if not algo.recurrent:
        raise SystemExit(f"recurrent_update_cost: error: {args.config} has policy.recurrent: false")
    rng = np.random.default_rng(0)
    e, t, hid, d = cfg.env.n_envs, cfg.algo.n_steps, algo.agent.state_size, algo.spec.obs_dim
    shape = (e, t) + algo.spec.action_shape
    actions = (rng.integers(0, algo.spec.n_actions, shape).astype(np.int32) if algo.spec.discrete
               else rng.standard_normal(shape).astype(np.float32))
    data = {"obs": rng.standard_normal((e, t, d)).astype(np.float32), "actions": actions,
            "log_probs": np.full((e, t), -0.69, np.float32), "advantages": rng.standard_normal((e, t)).astype(np.float32),
            "returns": rng.standard_normal((e, t)).astype(np.float32),
            "values": rng.standard_normal((e, t)).astype(np.float32),
            "episode_starts": (rng.random((e, t)) < 0.05).astype(np.float32),
            "state0": np.zeros((e, 4 * hid), np.float32)}
    lr, clip = cfg.algo.learning_rate, cfg.algo.clip_range
    t0 = time.perf_counter()
    algo._train_fused(data, lr, clip)
    first = time.perf_counter() - t0
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        algo._train_fused(data, lr, clip)
        times.append(time.perf_counter() - t0)
    phase = float(np.median(times))
    minibatches = algo.phase_cell.total
    act = FastCall(PackedRollout(algo.rollout_cell))
    obs, state = rng.standard_normal((e, d)).astype(np.float32), np.zeros((e, 4 * hid), np.float32)
    starts, noise = np.ones(e, np.float32), algo.sample_noise(e)
    for _ in range(20):
        act(Tensor(obs), Tensor(state), Tensor(starts), Tensor(noise)).asnumpy()
    t0 = time.perf_counter()
    for _ in range(500):
        act(Tensor(obs), Tensor(state), Tensor(starts), Tensor(noise)).asnumpy()
    acting = (time.perf_counter() - t0) / 500
    print(f"first phase (compile included) {first:.1f} s; phase {phase * 1e3:.1f} ms = {minibatches} minibatches "
          f"x {phase * 1e3 / minibatches:.1f} ms; acting {acting * 1e3:.2f} ms per call")


if __name__ == "__main__":
    main()
