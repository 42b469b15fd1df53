"""The LSTM of recurrent policies, from the ops every export already uses, and the recurrent
policy cell (the export target of a recurrent run).

Why not MindSpore's fused ``nn.LSTM``: a fused RNN operator's gate order, bias layout and
arithmetic differ between runtimes (and between its own CPU and Ascend kernels); the policy that
acts during training must be the graph every runtime evaluates. Here one step is two MatMuls,
Adds, one sigmoid over the scaled gate row, one Split and the tanh form ``2 * sigmoid(2x) - 1``,
in PyTorch's gate order (input, forget, cell, output):

    gates = x @ W_ih^T + b + h @ W_hh^T
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g)
    h' = sigmoid(o) * tanh(c')

The state convention is Stable-Baselines3-contrib's: ``episode_start`` (1.0 on the first step
of an episode, else 0.0) zeroes the incoming state inside the cell, ``h * (1 - episode_start)``,
so a caller never resets the state itself and never resets it one step off.

The sigmoid is ``1 / (1 + 2^(-x log2 e))`` (:func:`~.mlp.pow_sigmoid`), not MindSpore's CPU
Sigmoid kernel (off by up to ~64 ulp). The state carries each step's rounding into every later
step: with that kernel, a trained CartPoleNoVel policy's c drifted ~1e-5 from ONNX Runtime over
a 500-step episode, and the float64 evaluation of the exported graph (export.exact) showed the
training cell, not the runtime, to be the inexact side.
"""
from __future__ import annotations

import numpy as np
from mindspore import Parameter, Tensor, nn, ops

from .mlp import Sigmoid, Tanh


class LSTM(nn.Cell):
    """One LSTM layer, ``hidden`` units. Initialized as PyTorch's ``nn.LSTM`` (what
    sb3-contrib's RecurrentPPO uses): every weight and both biases uniform in
    ``(-1/sqrt(hidden), 1/sqrt(hidden))``, from the run's Generator; the two biases are kept as
    their sum (one Add fewer per step, the same distribution of initial gates)."""

    def __init__(self, rng: np.random.Generator, in_dim: int, hidden: int):
        super().__init__()
        bound = 1.0 / np.sqrt(hidden)
        w_ih = rng.uniform(-bound, bound, (4 * hidden, in_dim)).astype(np.float32)
        w_hh = rng.uniform(-bound, bound, (4 * hidden, hidden)).astype(np.float32)
        bias = (rng.uniform(-bound, bound, 4 * hidden) + rng.uniform(-bound, bound, 4 * hidden)).astype(np.float32)
        self.w_ih = Parameter(Tensor(w_ih), name="w_ih")
        self.w_hh = Parameter(Tensor(w_hh), name="w_hh")
        self.bias = Parameter(Tensor(bias), name="bias")
        self.hidden = hidden
        self.matmul = ops.MatMul(transpose_b=True)
        scale = np.ones(4 * hidden, np.float32)
        scale[2 * hidden:3 * hidden] = 2.0
        self.gate_scale = Tensor(scale)
        self.sigmoid = Sigmoid()
        self.tanh_c = Tanh(pow=True)

    def input_gates(self, x):
        """``x @ W_ih^T + b`` for any number of rows: the part of a step that does not depend on
        the state (the update phase computes it for a whole sequence at once)."""
        return self.matmul(x, self.w_ih) + self.bias

    def cell(self, gx, h, c):
        """One step from the input gates ``gx``: -> (h', c'). The three sigmoid gates and the
        candidate's ``sigmoid(2g)`` are one sigmoid over the scaled gate row (the candidate's
        block times 2, the others times 1: exact), split in one op; then ``tanh(g) = 2 * s - 1``."""
        y = self.sigmoid((gx + self.matmul(h, self.w_hh)) * self.gate_scale)
        i, f, s, o = ops.split(y, self.hidden, axis=1)
        c2 = f * c + i * (2.0 * s - 1.0)
        return o * self.tanh_c(c2), c2

    def construct(self, x, h, c, episode_start):
        """One step with the reset rule: the state is zeroed where ``episode_start`` is 1."""
        keep = 1.0 - ops.expand_dims(episode_start, 1)
        return self.cell(self.input_gates(x), h * keep, c * keep)


class RecurrentPolicyCell(nn.Cell):
    """The deterministic recurrent policy: (obs, h, c, episode_start) -> (action, h', c').

    normalizer -> encoder (Discrete / Dict observations) -> actor LSTM (with the reset rule) -> actor network -> action head: the same
    Parameter objects the rollout cell and the losses use, as :class:`~.heads.PolicyCell`, with
    the actor's state as explicit inputs and outputs (no state inside the graph, any batch)."""

    def __init__(self, normalizer, encoder, lstm: LSTM, actor: nn.Cell, head: nn.Cell, outputs=None,
                 kind=None, sde_scale=None):
        super().__init__()
        self.normalizer = normalizer
        self.encoder = encoder  # one-hot / Dict keys (networks.encoders), or None for a Box row
        self.lstm = lstm
        self.actor = actor
        self.head = head
        # a distribution export (heads.DistributionPolicyCell's outputs cell, kind and gSDE scale):
        # the distribution's outputs after the next state
        self.outputs = outputs
        self.kind = kind
        self.sde_scale = sde_scale

    def construct(self, obs, h, c, episode_start):
        x = self.normalizer(obs)
        if self.encoder is not None:
            x = self.encoder(x)
        h2, c2 = self.lstm(x, h, c, episode_start)
        if self.outputs is None:
            return self.head(self.actor(h2)), h2, c2
        out, params = self.outputs(h2)
        return (self.head(out), h2, c2) + params
