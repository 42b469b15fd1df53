"""msrl's Adam against a NumPy reference of PyTorch's Adam (epsilon added to the bias-corrected
sqrt(v)), and against MindSpore's nn.Adam, which puts it elsewhere."""
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn

from msrl_consistent.determinism import configure_mindspore
from msrl_consistent.optim import Adam


def torch_adam(p, grads, lr, eps, b1=0.9, b2=0.999):
    """torch.optim.Adam's update (torch/optim/adam.py, single-tensor path) in float64."""
    p = p.astype(np.float64).copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        denom = np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps
        p = p - lr / (1 - b1 ** t) * m / denom
    return p


class Step(nn.Cell):
    def __init__(self, opt):
        super().__init__()
        self.opt = opt

    def construct(self, g):
        return self.opt((g,))


def _run(cls, p0, grads, lr, eps):
    w = Parameter(Tensor(p0.copy()), name="w")
    step = Step(cls([w], learning_rate=lr, eps=eps))
    for g in grads:
        step(Tensor(g))
    return w.asnumpy()


def test_adam_matches_torchs_formula_not_mindsporess():
    configure_mindspore("CPU")
    rng = np.random.default_rng(0)
    p0 = rng.normal(size=(64,)).astype(np.float32)
    # small gradients make epsilon matter: where the two placements differ most
    grads = [(rng.normal(size=(64,)) * 1e-5).astype(np.float32) for _ in range(20)]
    ref = torch_adam(p0, grads, lr=1e-3, eps=1e-5)
    ours = _run(Adam, p0, grads, 1e-3, 1e-5)
    theirs = _run(nn.Adam, p0, grads, 1e-3, 1e-5)
    # compare the updates (20 steps of ~1e-3): float32 rounding of p adds ~1 ulp per step
    d_ref, d_ours, d_theirs = ref - p0, ours - p0, theirs - p0
    np.testing.assert_allclose(d_ours, d_ref, rtol=1e-3, atol=6e-7)
    assert np.median(np.abs(d_theirs - d_ref) / np.abs(d_ref)) > 0.1  # MindSpore's placement: far off


def test_building_the_optimizer_prints_no_mindspore_deprecation_notice():
    # nn.Adam builds a FusedSparseAdam primitive (never used here) and MindSpore logs that it is
    # deprecated; a user of the Python API (no GLOG_v set) should not see it, other messages should
    import os
    import subprocess
    import sys
    code = ("from mindspore import nn, log\nfrom msrl_consistent.optim import Adam\n"
            "Adam(nn.Dense(2, 2).trainable_params())\nlog.warning('a message that passes')\n")
    env = {k: v for k, v in os.environ.items() if k != "GLOG_v"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "a message that passes" in r.stderr and "FusedSparseAdam" not in r.stderr, r.stderr


@pytest.mark.parametrize("sizes", [[(512, 3136), (1, 80000)], [(300, 300)], [(99, 101)]])
def test_the_global_gradient_norm_has_one_summation_order_in_every_launch(sizes):
    # MindSpore's CPU ReduceSum splits a whole vector of >= 200,000 elements into blocks whose size
    # it picks by timing its first launches, so one input gave other bits from launch 5 on (and,
    # later, bits that depended on the machine's load): a Breakout PPO run trained one of two sets
    # of parameters. The norm must give one bit pattern in every launch, and the right value.
    from msrl_consistent.algorithms.cells import GradNormClip as Clip
    configure_mindspore("CPU")

    class Norm(nn.Cell):
        def __init__(self):
            super().__init__()
            self.clip = Clip(0.5)

        def construct(self, *grads):
            return self.clip.norm(grads)

    rng = np.random.default_rng(1)
    cases = [[(rng.standard_normal(s) * 10.0 ** rng.uniform(-3, -1)).astype(np.float32) for s in sizes]
             for _ in range(12)]
    got = []
    for grads in cases:  # a new graph each: its kernels time their block sizes over the first launches
        norm, x = Norm(), [Tensor(g) for g in grads]
        got.append({norm(*x).asnumpy().tobytes() for _ in range(8)})
    assert [len(g) for g in got] == [1] * len(cases)
    for grads, g in zip(cases, got):
        want = np.sqrt(sum((x.astype(np.float64) ** 2).sum() for x in grads))
        assert abs(np.frombuffer(g.pop(), np.float32)[0] - want) <= 2e-6 * want
