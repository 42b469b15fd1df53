"""Network pieces of the policy cell: activation accuracy, action heads, orthogonal init."""
import numpy as np
from mindspore import Tensor, nn

from msrl_consistent.determinism import configure_mindspore
from msrl_consistent.networks.heads import ArgmaxHead, ClipHead, TanhScaleHead
from msrl_consistent.networks.mlp import Tanh, orthogonal

configure_mindspore("CPU")


class _Apply(nn.Cell):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def construct(self, x):
        return self.cell(x)


def test_tanh_is_accurate():
    # MindSpore's CPU Tanh kernel is off by up to 1e-4; ours must stay near the exact value.
    x = np.linspace(-12, 12, 100001).astype(np.float32)
    y = _Apply(Tanh())(Tensor(x)).asnumpy()
    assert np.abs(y - np.tanh(x.astype(np.float64))).max() < 3e-6
    assert np.all(np.abs(y) <= 1.0) and y[0] == -1.0 and y[-1] == 1.0


def test_tanh_scale_head_asymmetric_bounds():
    low, high = np.array([-1.0, 0.0], np.float32), np.array([3.0, 5.0], np.float32)
    u = np.array([[-50.0, -50.0], [0.0, 0.0], [50.0, 50.0], [0.5, -0.3]], np.float32)
    a = _Apply(TanhScaleHead(low, high))(Tensor(u)).asnumpy()
    np.testing.assert_allclose(a[0], low)
    np.testing.assert_allclose(a[1], [1.0, 2.5], atol=1e-6)
    np.testing.assert_allclose(a[2], high)
    np.testing.assert_allclose(a[3], low + (np.tanh(u[3]) + 1) / 2 * (high - low), atol=1e-5)
    assert np.all(a >= low) and np.all(a <= high)


def test_clip_and_argmax_heads():
    c = _Apply(ClipHead(np.array([-2.0], np.float32), np.array([2.0], np.float32)))
    np.testing.assert_array_equal(c(Tensor(np.array([[-3.0], [0.5], [9.0]], np.float32))).asnumpy(), [[-2.0], [0.5], [2.0]])
    out = _Apply(ArgmaxHead())(Tensor(np.array([[0.1, 0.9], [2.0, -1.0]], np.float32))).asnumpy()
    assert out.dtype == np.int32 and out.tolist() == [1, 0]


def test_orthogonal_init():
    rng = np.random.default_rng(0)
    w = orthogonal(rng, 64, 4, 2.0)
    np.testing.assert_allclose(w.T @ w, 4.0 * np.eye(4), atol=1e-5)
    w = orthogonal(rng, 2, 64, 1.0)
    np.testing.assert_allclose(w @ w.T, np.eye(2), atol=1e-5)
