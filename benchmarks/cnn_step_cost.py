"""The cost of one NatureCNN step at batch 256 on this CPU: msrl's ImageEncoder (raw 210x160x3
frames x 4 stacked, grayscale + 84x84 area resize in the cell, NatureCNN) forward, its
preprocessing alone, forward + backward, and torch's (SB3's NatureCNN on 4 x 84 x 84) forward +
backward at 1 and 2 threads. Each timing is the second call (the first compiles / warms up).

    python benchmarks/cnn_step_cost.py          # needs torch and stable-baselines3 (the bench extra)
"""
import json
import time
from dataclasses import replace

import numpy as np


def main() -> None:
    import mindspore as ms
    from gymnasium import spaces
    from mindspore import Tensor, ops

    from msrl_consistent.determinism import configure_mindspore
    from msrl_consistent.envs import space_spec
    from msrl_consistent.networks import ImageEncoder

    configure_mindspore("CPU")
    spec = replace(space_spec(spaces.Box(0, 255, (210, 160, 3), np.uint8), spaces.Discrete(4)), frame_stack=4)
    enc = ImageEncoder(np.random.default_rng(0), spec, "nature", True, [84, 84], True)
    x = Tensor(np.random.default_rng(0).integers(0, 256, (256, spec.obs_dim)).astype(np.uint8))
    out = {}
    enc(x).asnumpy()
    t0 = time.perf_counter()
    enc(x).asnumpy()
    out["msrl_forward_s"] = time.perf_counter() - t0
    enc.preprocess(x).asnumpy()
    t0 = time.perf_counter()
    enc.preprocess(x).asnumpy()
    out["msrl_preprocess_s"] = time.perf_counter() - t0

    class Loss(ms.nn.Cell):
        def __init__(self, e):
            super().__init__()
            self.e = e

        def construct(self, x):
            return self.e(x).sum()

    grad = ops.value_and_grad(Loss(enc), None, enc.trainable_params())
    grad(x)
    t0 = time.perf_counter()
    _, g = grad(x)
    g[0].asnumpy()
    out["msrl_forward_backward_s"] = time.perf_counter() - t0

    import torch
    from stable_baselines3.common.torch_layers import NatureCNN
    for th in (1, 2):
        torch.set_num_threads(th)
        net = NatureCNN(spaces.Box(0, 255, (4, 84, 84), np.uint8), 512)
        xt = torch.as_tensor(np.random.default_rng(0).integers(0, 256, (256, 4, 84, 84)).astype(np.float32)) / 255
        net(xt).sum().backward()
        t0 = time.perf_counter()
        net(xt).sum().backward()
        out[f"torch_{th}_threads_forward_backward_s"] = time.perf_counter() - t0
    print(json.dumps({k: round(v, 3) for k, v in out.items()}, indent=1))


if __name__ == "__main__":
    main()
