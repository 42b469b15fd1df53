"""The activations' hand-written backwards (Tanh: 1 - tanh(x)^2; the recurrent cells' Sigmoid:
y (1 - y)) within float32 rounding of the float64 reference, through value_and_grad in
GRAPH_MODE, and their forwards' accuracy."""
import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from msrl_consistent.determinism import configure_mindspore
from msrl_consistent.networks.mlp import Sigmoid, Tanh


class Sum(nn.Cell):
    def __init__(self, act=None):
        super().__init__()
        self.act = act if act is not None else Tanh()

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


def test_pow_sigmoid_is_accurate_where_the_cpu_kernel_is_not():
    """The recurrent cells' sigmoid, 1 / (1 + 2^(-x log2 e)), within 1.5e-7 of the exact sigmoid
    (MindSpore's CPU Sigmoid kernel: 8e-7), and the tanh built on it within 3e-7 (the project's
    other tanh, on that kernel: 1.6e-6); both saturate exactly, never NaN."""
    configure_mindspore("CPU")
    x = np.concatenate([np.linspace(-30, 30, 6001),
                        np.random.default_rng(0).normal(0, 5, 20000)]).astype(np.float32)
    x64 = x.astype(np.float64)
    assert np.max(np.abs(Sigmoid()(Tensor(x)).asnumpy() - 1 / (1 + np.exp(-x64)))) < 1.5e-7
    assert np.max(np.abs(Tanh(pow=True)(Tensor(x)).asnumpy() - np.tanh(x64))) < 3e-7
    far = np.array([-1e30, -1e4, -200.0, 200.0, 1e4, 1e30], np.float32)
    assert np.array_equal(Sigmoid()(Tensor(far)).asnumpy(), (far > 0).astype(np.float32))
    assert np.array_equal(Tanh(pow=True)(Tensor(far)).asnumpy(), np.sign(far))


def test_pow_sigmoid_backward_is_y_times_one_minus_y():
    configure_mindspore("CPU")
    x = np.concatenate([np.linspace(-12, 12, 241), [0.0, 30.0, -30.0]]).astype(np.float32)
    w = np.random.default_rng(1).normal(size=x.shape).astype(np.float32)
    g = ops.grad(Sum(Sigmoid()), grad_position=0)(Tensor(x), Tensor(w)).asnumpy()
    y = 1 / (1 + np.exp(-x.astype(np.float64)))
    assert np.all(np.abs(g - w * y * (1 - y)) <= 1e-7 * np.abs(w) + 1e-12)
    gt = ops.grad(Sum(Tanh(pow=True)), grad_position=0)(Tensor(x), Tensor(w)).asnumpy()
    assert np.all(np.abs(gt - w * (1 - np.tanh(x.astype(np.float64)) ** 2)) <= 1e-6 * np.abs(w))


def test_squashed_action_head_is_the_pow_tanh():
    """SAC's and TD3's exported action ``low + (tanh(u) + 1) (high - low) / 2`` within 5e-7 of exact
    arithmetic over Pendulum's [-2, 2] (with the CPU Sigmoid kernel's tanh it was 3.3e-6 off, beyond
    the 1e-6 a board's check allows); its tanh is the recurrent cells' form bit for bit."""
    from msrl_consistent.networks.heads import TanhScaleHead
    from msrl_consistent.networks.mlp import pow_sigmoid, pow_tanh
    configure_mindspore("CPU")
    u = np.concatenate([np.linspace(-8, 8, 16001), np.random.default_rng(2).normal(0, 3, 20000)]).astype(np.float32)
    low, high = np.array([-2.0], np.float32), np.array([2.0], np.float32)
    a = TanhScaleHead(low, high)(Tensor(u[:, None])).asnumpy()[:, 0]
    exact = -2.0 + (np.tanh(u.astype(np.float64)) + 1.0) * 2.0
    assert np.max(np.abs(a - exact)) < 5e-7, np.max(np.abs(a - exact))
    assert np.array_equal(pow_tanh(Tensor(u)).asnumpy(), (2.0 * pow_sigmoid(2.0 * Tensor(u)) - 1.0).asnumpy())
