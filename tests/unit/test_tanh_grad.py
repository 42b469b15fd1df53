"""The Tanh activation's hand-written backward: the derivative of tanh, 1 - tanh(x)^2, within
float32 rounding of the float64 reference, through value_and_grad in GRAPH_MODE."""
import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from msrl_consistent.determinism import configure_mindspore
from msrl_consistent.networks.mlp import Tanh


class Sum(nn.Cell):
    def __init__(self):
        super().__init__()
        self.act = Tanh()

    def construct(self, x, w):
        return (self.act(x) * w).sum()


def test_tanh_backward_is_one_minus_square():
    configure_mindspore("CPU")
    x = np.concatenate([np.linspace(-9, 9, 181), [0.0, 1e-6, -1e-6, 20.0, -20.0]]).astype(np.float32)
    w = np.random.default_rng(0).normal(size=x.shape).astype(np.float32)
    grad = ops.grad(Sum(), grad_position=0)
    g = grad(Tensor(x), Tensor(w)).asnumpy()
    ref = w.astype(np.float64) * (1.0 - np.tanh(x.astype(np.float64)) ** 2)
    # 1 - y^2 from accurate_tanh's y (within 1.6e-6 of tanh): error <= 2 * 1.6e-6 plus rounding, times |w|
    assert np.all(np.abs(g - ref) <= 4e-6 * np.abs(w)), np.max(np.abs(g - ref) / np.abs(w))
    assert ms.get_context("mode") == ms.GRAPH_MODE
    # the forward is accurate_tanh's, not MindSpore's approximate kernel
    fwd = Tanh()(Tensor(x)).asnumpy()
    assert np.max(np.abs(fwd - np.tanh(x.astype(np.float64)))) < 2e-6


def test_tanh_forward_saturates_without_overflow():
    configure_mindspore("CPU")
    x = np.array([-1e30, -1e4, -90.0, -20.0, 20.0, 90.0, 1e4, 1e30], np.float32)
    y = Tanh()(Tensor(x)).asnumpy()
    assert np.array_equal(y, np.sign(x)), y  # exactly +-1, never NaN or beyond the range
