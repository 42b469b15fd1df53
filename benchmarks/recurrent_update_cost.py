"""Recurrent PPO's update phase and acting call, timed in one process on random sequences.

    python benchmarks/recurrent_update_cost.py [--config configs/ppo/CartPoleNoVel-v1-lstm.yaml]

The config's whole update phase (``PPO._train_fused``: n_epochs x minibatches of env sequences,
one graph call) on random rollout arrays of its shapes: the first call (compilation included),
then the median of 5 calls (``--reps``), per phase and per minibatch; then the rollout graph call (packed
outputs, what the training loop runs), mean over 500 calls at the config's n_envs.

``--compare-sigmoid``: the same, for the LSTM's pow sigmoid (what msrl trains and exports) and
MindSpore's Sigmoid kernel (what it used before), the two built side by side and their phases
and acting calls interleaved (this machine's speed drifts; only side-by-side ratios mean anything).
"""
import argparse
import os
import time

import numpy as np
from mindspore import nn, ops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "ppo", "CartPoleNoVel-v1-lstm.yaml"))
    p.add_argument("--compare-sigmoid", action="store_true",
                   help="also time the LSTM with MindSpore's Sigmoid kernel, interleaved with the pow sigmoid")
    p.add_argument("--reps", type=int, default=5, help="timed phases (and 500-call acting loops) per form")
    args = p.parse_args()
    from msrl_consistent.config import load_config

    cfg = load_config(args.config)
    forms = {"pow sigmoid": build(cfg, args.config, kernel=False)}
    if args.compare_sigmoid:
        forms["Sigmoid kernel"] = build(cfg, args.config, kernel=True)
    first = {name: f["phase"]() for name, f in forms.items()}
    times: dict = {(name, part): [] for name in forms for part in ("phase", "act")}
    for _ in range(args.reps):
        for name, f in forms.items():
            times[(name, "phase")].append(f["phase"]())
            times[(name, "act")].append(f["act"]())
    for name, f in forms.items():
        phase, acting = float(np.median(times[(name, "phase")])), float(np.median(times[(name, "act")]))
        print(f"{name}: first phase (compile included) {first[name]:.1f} s; phase {phase * 1e3:.1f} ms = "
              f"{f['minibatches']} minibatches x {phase * 1e3 / f['minibatches']:.1f} ms; acting {acting * 1e3:.2f} ms per call")
    if args.compare_sigmoid:
        ratio = {part: np.median(times[("pow sigmoid", part)]) / np.median(times[("Sigmoid kernel", part)])
                 for part in ("phase", "act")}
        print(f"pow sigmoid / Sigmoid kernel: update phase {ratio['phase']:.3f}x, acting {ratio['act']:.3f}x")


class KernelSigmoid(nn.Cell):
    """MindSpore's Sigmoid kernel as a cell (what the LSTM used before its pow sigmoid)."""

    def construct(self, x):
        return ops.sigmoid(x)


def build(cfg, path, kernel: bool):
    """A recurrent PPO of the config with random rollout arrays of its shapes: callables timing
    one update phase and 500 acting calls."""
    from mindspore import Tensor

    from msrl_consistent import registry
    from msrl_consistent.algorithms.on_policy import PackedRollout
    from msrl_consistent.fastcall import FastCall
    from msrl_consistent.networks.mlp import Tanh

    algo = registry.get("ppo")(cfg)
    if not algo.recurrent:
        raise SystemExit(f"recurrent_update_cost: error: {path} has policy.recurrent: false")
    if kernel:
        for lstm in (algo.agent.lstm_actor, algo.agent.lstm_critic):
            lstm.sigmoid, lstm.tanh_c = KernelSigmoid(), Tanh()
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

    def phase():
        t0 = time.perf_counter()
        algo._train_fused(data, lr, clip)
        return time.perf_counter() - t0

    act = FastCall(PackedRollout(algo.rollout_cell))
    obs, state = rng.standard_normal((e, d)).astype(np.float32), np.zeros((e, 4 * hid), np.float32)
    starts, noise = np.ones(e, np.float32), algo.sample_noise(e)
    for _ in range(20):
        act(Tensor(obs), Tensor(state), Tensor(starts), Tensor(noise)).asnumpy()

    def acting():
        t0 = time.perf_counter()
        for _ in range(500):
            act(Tensor(obs), Tensor(state), Tensor(starts), Tensor(noise)).asnumpy()
        return (time.perf_counter() - t0) / 500

    return {"phase": phase, "act": acting, "minibatches": algo.phase_cell.total}


if __name__ == "__main__":
    main()
