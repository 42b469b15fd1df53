"""Dense layers with host-side initialization, the MLP trunk and the accurate tanh and sigmoid forms.

Weights are initialized on the host from the run's seeded NumPy Generator (orthogonal init as in
Stable-Baselines3 / CleanRL, or PyTorch's uniform default), so initialization is reproducible
independently of MindSpore's random kernels.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
from mindspore import Tensor, nn, ops
from mindspore import dtype as mstype
from mindspore.ops.operations._grad_ops import SigmoidGrad, TanhGrad  # the kernels behind ops.sigmoid's / ops.tanh's own gradients

NEG_LOG2_E = -1.4426950408889634
ONE = Tensor(1.0, mstype.float32)
TWO = Tensor(2.0, mstype.float32)


def accurate_tanh(x):
    """tanh(x) = 2 * sigmoid(2x) - 1: four kernels, saturating to exactly +-1, no overflow.

    Why not ops.tanh: MindSpore 2.10's CPU Tanh kernel is an approximation (off by ~1e-4), enough
    for a training cell and its ONNX Runtime export to disagree beyond the cross-runtime
    tolerance; this form agrees with the exact tanh to float32 rounding, in the training cell
    and in every runtime the export reaches."""
    return 2.0 * ops.sigmoid(2.0 * x) - 1.0


def pow_sigmoid(x):
    """sigmoid(x) = 1 / (1 + 2^(-x log2 e)): four kernels (Mul, Pow, Add, Div), saturating to
    exactly 0 and 1.

    Why: MindSpore 2.10's CPU Sigmoid and Exp kernels are off by up to ~64 ulp (median ~2);
    its Pow is correctly rounded, and Mul, Add and Div are IEEE-rounded in every runtime, so this
    form stays within a few ulp of the exact sigmoid in the training cell and in every runtime
    the export reaches (the ONNX graph holds the same four ops). The recurrent policies use it:
    their state carries each step's rounding into every later step (see networks.lstm)."""
    return ops.div(ONE, ONE + ops.pow(2.0, x * NEG_LOG2_E))  # 1.0 / y would become Reciprocal, which ONNX export lacks


def pow_tanh(x):
    """tanh(x) = 2 / (1 + 2^(-2x log2 e)) - 1: pow_sigmoid's form (five kernels: Mul, Pow, Add, Div,
    Sub), bit for bit ``2 * pow_sigmoid(2x) - 1`` (the scalings by 2 are exact), saturating to
    exactly +-1. Within ~1e-7 of the exact tanh in the training cell and in every runtime the
    export reaches; accurate_tanh inherits the CPU Sigmoid kernel's error (up to ~3e-6 relative).
    The recurrent cells' candidate and cell-state tanh, and the squashed action of SAC and TD3
    (where the action itself is the output a board compares), use it. The MLP activation does not:
    MindSpore's CPU Pow costs ~6x the Sigmoid kernel per element (at batch 256 x 64), which made
    PPO CartPole's update 40% slower; there the float32 dot products' own rounding is of the same
    order as the Sigmoid kernel's."""
    return ops.div(TWO, ONE + ops.pow(2.0, x * (2.0 * NEG_LOG2_E))) - 1.0


class Sigmoid(nn.Cell):
    """pow_sigmoid forward; the backward ``dout * y * (1 - y)`` in one kernel, MindSpore's own
    SigmoidGrad (what ops.sigmoid's gradient runs), instead of differentiating four ops."""

    def __init__(self):
        super().__init__()
        self.grad = SigmoidGrad()

    def construct(self, x):
        return pow_sigmoid(x)

    def bprop(self, x, out, dout):
        return (self.grad(out, dout),)


class Tanh(nn.Cell):
    """The tanh activation of every msrl network: accurate_tanh forward, and the backward
    ``dout * (1 - y^2)`` (PyTorch's tanh_backward) in one kernel, MindSpore's own TanhGrad
    (it rounds ``1 - y^2`` once, as a fused multiply-add), instead of differentiating
    accurate_tanh's ops. Only training arithmetic depends on it; the exported graph holds the
    forward alone. ``pow=True``: the forward is pow_tanh (the recurrent cells' and the squashed
    actions' form)."""

    def __init__(self, pow: bool = False):
        super().__init__()
        self.grad = TanhGrad()
        self.pow = pow

    def construct(self, x):
        if self.pow:
            return pow_tanh(x)
        return accurate_tanh(x)

    def bprop(self, x, out, dout):
        return (self.grad(out, dout),)


ACTIVATIONS = {"tanh": Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU}


def orthogonal(rng: np.random.Generator, out_dim: int, in_dim: int, gain: float) -> np.ndarray:
    """Orthogonal matrix (Saxe et al. 2014), computed with NumPy from the given Generator."""
    a = rng.standard_normal((max(out_dim, in_dim), min(out_dim, in_dim)))
    q, r = np.linalg.qr(a)
    q *= np.sign(np.diag(r))
    if out_dim < in_dim:
        q = q.T
    return (gain * q[:out_dim, :in_dim]).astype(np.float32)


def dense(rng: np.random.Generator, in_dim: int, out_dim: int, gain: float, ortho: bool = True) -> nn.Dense:
    """nn.Dense with host-side init: orthogonal(gain) and zero bias, or PyTorch's uniform default."""
    if ortho:
        w = orthogonal(rng, out_dim, in_dim, gain)
        b = np.zeros(out_dim, np.float32)
    else:
        bound = 1.0 / np.sqrt(in_dim)
        w = rng.uniform(-bound, bound, (out_dim, in_dim)).astype(np.float32)
        b = rng.uniform(-bound, bound, (out_dim,)).astype(np.float32)
    return nn.Dense(in_dim, out_dim, weight_init=Tensor(w), bias_init=Tensor(b))


class MLP(nn.Cell):
    """Dense -> activation, for each hidden size; optional output layer without activation."""

    def __init__(self, rng, in_dim: int, hidden: Sequence[int], activation: str,
                 out_dim: Optional[int] = None, out_gain: float = 1.0, ortho: bool = True,
                 out_activation: Optional[str] = None):
        super().__init__()
        layers: List[nn.Cell] = []
        d = in_dim
        for h in hidden:
            layers += [dense(rng, d, h, float(np.sqrt(2.0)), ortho), ACTIVATIONS[activation]()]
            d = h
        if out_dim is not None:
            layers.append(dense(rng, d, out_dim, out_gain, ortho))
            d = out_dim
            if out_activation:
                layers.append(ACTIVATIONS[out_activation]())
        self.out_dim = d
        self.layers = nn.SequentialCell(layers)

    def construct(self, x):
        return self.layers(x)


class Chain(nn.Cell):
    """``second(first(x))``: lets a shared trunk feed two heads without copying it."""

    def __init__(self, first: nn.Cell, second: nn.Cell):
        super().__init__()
        self.first = first
        self.second = second

    def construct(self, x):
        return self.second(self.first(x))
