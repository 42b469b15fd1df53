"""Networks with a leading member axis: K copies of one network as stacked Parameters, so a
population's update runs one BatchMatMul per layer for all K members.

A stacked BatchMatMul's slice k is not always bit-identical to the MatMul of member k's own
network on this CPU (an output of width 1 differs), so members act through their own networks
(the exported cells) and the stacked copies serve the update; ``pairs`` maps every stacked
Parameter to the members' Parameters it is written back to.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops

from ..normalization import ObsNormalizer
from .agents import QNetwork
from .mlp import MLP, Chain


def stack_parameter(params: Sequence[Parameter], name: str) -> Parameter:
    """One Parameter holding the members' values of one parameter on a new leading axis (trainable
    as theirs are: a target network's copy stays frozen)."""
    return Parameter(Tensor(np.stack([p.asnumpy() for p in params])), name=name,
                     requires_grad=bool(params[0].requires_grad))


class StackedBias(nn.Cell):
    """``x (K, B, out) + b (K, out)``, whose bias gradient is one BatchMatMul ``ones (K, 1, B) @
    dout``: the broadcast add's own gradient (a ReduceSum over the batch axis) cost several times
    the BatchMatMul on this CPU (docs/benchmarks.md, populations)."""

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


def stack_cell(cells: Sequence, name: str):
    """The members' copies of one sub-network, stacked with the same interface: an MLP or a Dense
    layer becomes a StackedMLP, a Chain or a QNetwork the same class around stacked parts, a
    Parameter a stacked Parameter."""
    c0 = cells[0]
    if isinstance(c0, Parameter):
        return stack_parameter(cells, name)
    if isinstance(c0, (MLP, nn.Dense)):
        return StackedMLP(cells, name)
    if isinstance(c0, Chain):
        return Chain(stack_cell([c.first for c in cells], f"{name}.first"),
                     stack_cell([c.second for c in cells], f"{name}.second"))
    if isinstance(c0, QNetwork):
        return QNetwork.around(stack_cell([c.net for c in cells], f"{name}.net"))
    raise TypeError(f"no stacked form of {type(c0).__name__} ({name})")


class MembersView(nn.Cell):
    """K agents' networks named in ``names``, stacked (:func:`stack_cell`) under the same names,
    so an algorithm's losses and steps, written against its agent, train K members at once: every
    input then carries a leading member axis and every reduction over rows is one per member.
    The observation normalizer is the identity (populations with normalized observations are
    trained one member after another). ``pairs`` maps each stacked Parameter to the members'
    Parameters it mirrors."""

    def __init__(self, agents: Sequence[nn.Cell], names: Sequence[str]):
        super().__init__()
        a0 = agents[0]
        self.spec = a0.spec
        self.members = len(agents)
        self.normalizer = ObsNormalizer(a0.spec.obs_dim, False)
        for attr in ("LOG_STD_MIN", "LOG_STD_MAX"):
            if hasattr(a0, attr):
                setattr(self, attr, getattr(a0, attr))
        self._pairs: List[tuple] = []
        for name in names:
            setattr(self, name, stack_cell([getattr(a, name) for a in agents], name))
            own = [_parameters(getattr(a, name)) for a in agents]
            self._pairs += [(p, [params[j] for params in own]) for j, p in enumerate(_parameters(getattr(self, name)))]
        self.member_params: Dict[int, List[Parameter]] = {id(s): ps for s, ps in self._pairs}

    def pairs(self, params: Optional[Sequence[Parameter]] = None) -> list:
        """(stacked Parameter, [member k's Parameter]) for each of these stacked Parameters (None: all)."""
        if params is None:
            return list(self._pairs)
        return [(p, self.member_params[id(p)]) for p in params]


def _parameters(x) -> List[Parameter]:
    """A Parameter, or a cell's Parameters in a fixed order (a stacked cell's in the same order as
    its members' cells')."""
    if isinstance(x, Parameter):
        return [x]
    if isinstance(x, StackedMLP):
        return [s for s, _ in x.pairs()]
    if isinstance(x, Chain):
        return _parameters(x.first) + _parameters(x.second)
    if isinstance(x, QNetwork):
        return _parameters(x.net)
    return list(x.get_parameters())


class WriteBack(nn.Cell):
    """Graph code: member k's Parameters <- slice k of the stacked ones (``pairs``), read after
    ``after`` (the output of the step that last wrote them); returns ``after``. The members' acting
    cells, which read their own Parameters, then act with the updated values."""

    def __init__(self, pairs):
        super().__init__()
        self.k = len(pairs[0][1])
        self.stacked_params = ParameterTuple([s for s, _ in pairs])
        # the members' Parameters share names (each member's agent names them alike), which a
        # ParameterTuple refuses; the graph tells them apart as objects
        object.__setattr__(self, "member_params", [p for _, ps in pairs for p in ps])

    def construct(self, after):
        j = 0
        for s in self.stacked_params:
            v = ops.depend(s, after)
            for k in range(self.k):
                ops.assign(self.member_params[j], v[k])
                j += 1
        return after
