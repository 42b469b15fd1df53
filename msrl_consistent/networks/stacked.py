"""Networks with a leading member axis: K copies of one network as stacked Parameters, so a
population's update runs one BatchMatMul per layer for all K members.

A stacked BatchMatMul's slice k is not always bit-identical to the MatMul of member k's own
network on this CPU (an output of width 1 differs), so members act through their own networks
(the exported cells) and the stacked copies serve the update; ``pairs`` maps every stacked
Parameter to the members' Parameters it is written back to.
"""
from __future__ import annotations

from typing import List, Sequence

import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops


def stack_parameter(params: Sequence[Parameter], name: str) -> Parameter:
    """One Parameter holding the members' values of one parameter on a new leading axis."""
    return Parameter(Tensor(np.stack([p.asnumpy() for p in params])), name=name)


class StackedBias(nn.Cell):
    """``x (K, B, out) + b (K, out)``, whose bias gradient is one BatchMatMul ``ones (K, 1, B) @
    dout``: the broadcast add's own gradient (a ReduceSum over the batch axis) took ~250 us per
    hidden layer at K = 5, B = 256 on this CPU, the BatchMatMul a fraction of it."""

    def __init__(self):
        super().__init__()
        self.bmm = ops.BatchMatMul()

    def construct(self, x, b):
        return x + ops.expand_dims(b, 1)

    def bprop(self, x, b, out, dout):
        ones = ops.ones((dout.shape[0], 1, dout.shape[1]), dout.dtype)
        return dout, self.bmm(ones, dout).squeeze(1)


class StackedMLP(nn.Cell):
    """K copies of one MLP (msrl_consistent.networks.mlp.MLP) as stacked Parameters: each Dense
    layer is ``BatchMatMul(x (K, B, in), W (K, out, in)^T) + b (K, 1, out)``, each activation the
    members' own activation cell (elementwise, any shape)."""

    def __init__(self, members: Sequence[nn.Cell], prefix: str):
        super().__init__()
        layers = [list(m.layers) if hasattr(m, "layers") else [m] for m in members]  # an MLP, or one Dense
        self.kinds: List[bool] = []  # True: a Dense layer, False: an activation
        weights, biases, acts = [], [], []
        for i, layer in enumerate(layers[0]):
            if isinstance(layer, nn.Dense):
                self.kinds.append(True)
                weights.append(stack_parameter([m[i].weight for m in layers], f"{prefix}.{i}.weight"))
                biases.append(stack_parameter([m[i].bias for m in layers], f"{prefix}.{i}.bias"))
            else:
                self.kinds.append(False)
                acts.append(layer)
        self.weights = ParameterTuple(weights) if weights else ()
        self.biases = ParameterTuple(biases) if biases else ()
        self.acts = nn.CellList(acts)
        self.member_layers = layers  # the members' Dense cells, for write_back
        self.bmm = ops.BatchMatMul(transpose_b=True)
        self.bias = StackedBias()

    def construct(self, x):
        d = 0
        a = 0
        for dense in self.kinds:
            if dense:
                x = self.bias(self.bmm(x, self.weights[d]), self.biases[d])
                d += 1
            else:
                x = self.acts[a](x)
                a += 1
        return x

    def pairs(self):
        """(stacked Parameter, [member k's Parameter]) for every stacked Parameter."""
        out = []
        d = 0
        for i, dense in enumerate(self.kinds):
            if dense:
                out.append((self.weights[d], [m[i].weight for m in self.member_layers]))
                out.append((self.biases[d], [m[i].bias for m in self.member_layers]))
                d += 1
        return out
