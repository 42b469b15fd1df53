"""Stacking K members' CNNs with a grouped convolution, against K separate convolutions: bitwise
differences and time, interleaved in one process.

    python benchmarks/stacked_conv.py [--members 2 4] [--batch 32] [--rounds 5]

The CNN is the image encoder's (SB3's NatureCNN: 8x8/4 32, 4x4/2 64, 3x3/1 64, ReLU) on 4 x 84 x
84 frames. "grouped": the K members' frames side by side on the channel axis, one Conv2D with
group=K per layer (weights (K * out, in, kh, kw)); "separate": each member's own Conv2D. Both
cells return the output and the gradients of sum(output) with respect to the input and every
weight (one graph call). Prints max |grouped - separate| per quantity and ms per call (median).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

os.environ.setdefault("GLOG_v", "3")
LAYERS = ((4, 32, 8, 4), (32, 64, 4, 2), (64, 64, 3, 1))  # (in, out, kernel, stride)


def build(k: int):
    import mindspore as ms
    from mindspore import nn, ops
    ms.set_context(mode=ms.GRAPH_MODE)

    class Grouped(nn.Cell):
        def __init__(self):
            super().__init__()
            self.convs = nn.CellList([ops.Conv2D(out_channel=k * o, kernel_size=kk, stride=s, group=k)
                                      for _, o, kk, s in LAYERS])

        def construct(self, x, w0, w1, w2):  # x (K, n, C, H, W), w_i (K, out, in, kh, kw)
            n = x.shape[1]
            h = x.transpose(1, 0, 2, 3, 4).reshape((n, -1) + x.shape[3:])
            for conv, w in zip(self.convs, (w0, w1, w2)):
                h = ops.relu(conv(h, w.reshape((-1,) + w.shape[2:])))
            return h.reshape((n, k, -1) + h.shape[2:]).transpose(1, 0, 2, 3, 4)

    class Separate(nn.Cell):
        def __init__(self):
            super().__init__()
            self.convs = nn.CellList([ops.Conv2D(out_channel=o, kernel_size=kk, stride=s) for _, o, kk, s in LAYERS])

        def construct(self, x, w0, w1, w2):
            outs = []
            for m in range(k):
                h = x[m]
                for conv, w in zip(self.convs, (w0, w1, w2)):
                    h = ops.relu(conv(h, w[m]))
                outs.append(h)
            return ops.stack(outs)

    class WithGrads(nn.Cell):
        def __init__(self, net):
            super().__init__()
            self.net = net
            self.grad = ops.GradOperation(get_all=True)

        def construct(self, x, w0, w1, w2):
            return (self.net(x, w0, w1, w2),) + self.grad(self.total)(x, w0, w1, w2)

        def total(self, x, w0, w1, w2):
            return self.net(x, w0, w1, w2).sum()

    return WithGrads(Grouped()), WithGrads(Separate())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, nargs="+", default=[2, 4])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    from mindspore import Tensor
    print("| K | batch | output | d input | d weight 1 | d weight 2 | d weight 3 | grouped ms | separate ms | "
          "grouped / separate |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for k in args.members:
        rng = np.random.default_rng(k)
        x = rng.random((k, args.batch, 4, 84, 84)).astype(np.float32)
        ws = [(rng.standard_normal((k, o, i, kk, kk)) * np.sqrt(2.0 / (i * kk * kk))).astype(np.float32)
              for i, o, kk, _ in LAYERS]
        inputs = [Tensor(x)] + [Tensor(w) for w in ws]
        grouped, separate = build(k)
        a = [t.asnumpy() for t in grouped(*inputs)]
        b = [t.asnumpy() for t in separate(*inputs)]
        diffs = [float(np.abs(u - v).max()) for u, v in zip(a, b)]
        times = {"grouped": [], "separate": []}
        for r in range(args.rounds):
            for name, cell in (("grouped", grouped), ("separate", separate))[::1 if r % 2 == 0 else -1]:
                t0 = time.perf_counter()
                for _ in range(3):
                    [t.asnumpy() for t in cell(*inputs)]
                times[name].append((time.perf_counter() - t0) / 3 * 1e3)
        g, s = statistics.median(times["grouped"]), statistics.median(times["separate"])
        print(f"| {k} | {args.batch} | " + " | ".join(f"{d:.1e}" for d in diffs) + f" | {g:.1f} | {s:.1f} | {g / s:.2f} |")


if __name__ == "__main__":
    main()
