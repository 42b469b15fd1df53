"""The cost of msrl's ImageEncoder on this CPU, per convolution implementation: raw 210x160x3
frames x 4 stacked, grayscale + 84x84 area resize in the cell, NatureCNN; forward, forward +
backward (gradients of all parameters), and the in-cell preprocessing alone (GRAPH mode), at each batch size;
then torch's (SB3's NatureCNN on 4 x 84 x 84, preprocessed input) forward + backward at 1 and 2
threads. Each timing is the median of ``--repeats`` calls after one warm-up call (the first
compiles).

``policy.conv_impl`` 'conv2d' is nn.Conv2d (MindSpore's CPU Conv2D: oneDNN 3.10 picks its
``jit_uni_ncsp:conv+ref:any`` implementation for the forward and backward-data passes on this
AVX-512 machine, hundreds of ms per layer, see docs/benchmarks.md); 'matmul' is
networks.conv.MatMulConv2d (Transpose / Gather / MatMul / BiasAdd, the same parameters).

    python benchmarks/cnn_step_cost.py [--batches 32 256] [--impls matmul conv2d] [--no-torch]
    python benchmarks/cnn_step_cost.py --impls matmul --no-torch --against-rev 9676cb6   # A/B, one process
    ONEDNN_MAX_CPU_ISA=AVX2 python benchmarks/cnn_step_cost.py --impls conv2d   # oneDNN's gemm conv
"""
import argparse
import json
import os
import statistics
import time
from dataclasses import replace

import numpy as np


def _time(fn, repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--impls", nargs="+", default=["matmul", "conv2d"], choices=["matmul", "conv2d"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--against-rev", metavar="REV",
                    help="also time the ImageEncoder of git revision REV (its msrl_consistent/networks/image.py, "
                         "imported beside the current one), interleaved with the current one, same inputs")
    args = ap.parse_args()

    import mindspore as ms
    from gymnasium import spaces
    from mindspore import Tensor, ops

    from msrl_consistent.determinism import configure_mindspore
    from msrl_consistent.envs import space_spec
    from msrl_consistent.networks.image import ImageEncoder

    configure_mindspore("CPU")
    spec = replace(space_spec(spaces.Box(0, 255, (210, 160, 3), np.uint8), spaces.Discrete(4)), frame_stack=4)

    class Loss(ms.nn.Cell):
        def __init__(self, e):
            super().__init__()
            self.e = e

        def construct(self, x):
            return self.e(x).sum()

    class Preprocess(ms.nn.Cell):  # a Cell, so it runs compiled like the encoder (a method call would not)
        def __init__(self, e):
            super().__init__()
            self.e = e

        def construct(self, x):
            return self.e.preprocess(x)

    out = {"ONEDNN_MAX_CPU_ISA": os.environ.get("ONEDNN_MAX_CPU_ISA"), "repeats": args.repeats}
    if args.against_rev:
        return ab(args, spec, ImageEncoder, Loss, Preprocess, out)
    for impl in args.impls:
        enc = ImageEncoder(np.random.default_rng(0), spec, "nature", True, [84, 84], True, impl)
        grad = ops.value_and_grad(Loss(enc), None, enc.trainable_params())
        pre = Preprocess(enc)
        for b in args.batches:
            x = Tensor(np.random.default_rng(0).integers(0, 256, (b, spec.obs_dim)).astype(np.uint8))
            out[f"{impl}_b{b}_forward_s"] = _time(lambda e=enc, v=x: e(v).asnumpy(), args.repeats)
            out[f"{impl}_b{b}_forward_backward_s"] = _time(lambda g=grad, v=x: g(v)[1][0].asnumpy(), args.repeats)
            if impl == args.impls[0]:
                out[f"preprocess_b{b}_s"] = _time(lambda p=pre, v=x: p(v).asnumpy(), args.repeats)
            print(json.dumps({k: v for k, v in out.items() if k.startswith(f"{impl}_b{b}")}), flush=True)

    if not args.no_torch:
        import torch
        from stable_baselines3.common.torch_layers import NatureCNN
        for th in (1, 2):
            torch.set_num_threads(th)
            net = NatureCNN(spaces.Box(0, 255, (4, 84, 84), np.uint8), 512)
            for b in args.batches:
                xt = torch.as_tensor(np.random.default_rng(0).integers(0, 256, (b, 4, 84, 84)).astype(np.float32)) / 255
                out[f"torch_{th}_threads_b{b}_forward_backward_s"] = _time(lambda n=net, v=xt: n(v).sum().backward(),
                                                                           args.repeats)
    print(json.dumps({k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in out.items()}, indent=1))


def networks_at(rev: str):
    """The module holding ImageEncoder as of git revision ``rev`` (msrl_consistent/networks/image.py,
    or msrl_consistent/networks.py before the networks package), imported beside its current
    counterpart (its relative imports resolve to the current package)."""
    import importlib.util
    import subprocess
    import sys
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for rel, package in (("msrl_consistent/networks/image.py", "msrl_consistent.networks"),  # noqa: B007  (both used after the loop)
                         ("msrl_consistent/networks.py", "msrl_consistent")):
        r = subprocess.run(["git", "-C", root, "show", f"{rev}:{rel}"], capture_output=True, text=True)
        if r.returncode == 0:
            break
    else:
        raise SystemExit(f"--against-rev {rev}: no ImageEncoder module at that revision")
    path = os.path.join(tempfile.mkdtemp(prefix="msrl-networks-"), os.path.basename(rel))
    with open(path, "w") as f:
        f.write(r.stdout)  # a file: MindSpore's graph parser reads the source of construct
    name = f"{package}._image_{rev}".replace("~", "_").replace("^", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def ab(args, spec, ImageEncoder, Loss, Preprocess, out):
    """The current ImageEncoder against the one of --against-rev: round-robin over the two, the
    same inputs, median per measurement; plus their largest difference in preprocessing and features."""
    import mindspore as ms  # noqa: F401  (configured by main)
    from mindspore import Tensor, ops
    old = networks_at(args.against_rev).ImageEncoder
    impl = args.impls[0]
    sides = {}
    for label, cls in (("current", ImageEncoder), (args.against_rev, old)):
        enc = cls(np.random.default_rng(0), spec, "nature", True, [84, 84], True, impl)
        sides[label] = (Preprocess(enc), enc, ops.value_and_grad(Loss(enc), None, enc.trainable_params()))
    for b in args.batches:
        x = Tensor(np.random.default_rng(0).integers(0, 256, (b, spec.obs_dim)).astype(np.uint8))
        res = {}
        for pre, enc, grad in sides.values():
            pre(x).asnumpy(), enc(x).asnumpy(), grad(x)[1][0].asnumpy()  # compile
        (pa, ea, _), (pb, eb, _) = sides.values()
        out[f"b{b}_preprocess_max_abs_diff"] = float(np.abs(pa(x).asnumpy() - pb(x).asnumpy()).max())
        out[f"b{b}_features_max_abs_diff"] = float(np.abs(ea(x).asnumpy() - eb(x).asnumpy()).max())
        for _ in range(args.repeats):
            for label, (pre, enc, grad) in sides.items():
                for what, fn in (("preprocess", lambda p=pre, v=x: p(v).asnumpy()),
                                 ("forward", lambda e=enc, v=x: e(v).asnumpy()),
                                 ("forward_backward", lambda g=grad, v=x: g(v)[1][0].asnumpy())):
                    t0 = time.perf_counter()
                    fn()
                    res.setdefault(f"{impl}_b{b}_{what}_s_{label}", []).append(time.perf_counter() - t0)
        out.update({k: statistics.median(v) for k, v in res.items()})
    print(json.dumps({k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in out.items()}, indent=1))


if __name__ == "__main__":
    main()
