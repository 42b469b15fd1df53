"""The optimizers of a population's stacked Parameters, and their state copied to and from the
members' own optimizers.

A population (PPO's population.py, SAC's and TD3's offpolicy_population.py) trains stacked copies
of its members' Parameters with one Adam per group of them (a member axis leads every Parameter
and moment). A member's checkpoint holds its own optimizer's state, which the population fills
from its slice of the stacked state when the checkpoint is written (``store_member_state``); a
population built from resumed members stacks their states again (``load_stacked_state``).
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops

from msrl_consistent.optim import Adam

Pairs = Sequence[Tuple[Parameter, List[Parameter]]]
"""(stacked Parameter, [member k's Parameter]) in the order of a stacked optimizer's Parameters."""


class MemberRateAdam(nn.Cell):
    """msrl's Adam with one learning rate per member (a learning-rate sweep): the fused Adam
    kernel steps zeroed scratch copies with learning rate 1 (its moments and bias corrections are
    the usual ones: they do not read the parameter), then ``p += lr_k * scratch`` and the
    scratch is zeroed again: three kernels per Parameter more than one shared rate."""

    def __init__(self, params, learning_rates: np.ndarray, eps: float):
        super().__init__()
        self.parameters = ParameterTuple(params)
        self.scratch = ParameterTuple([Parameter(Tensor(np.zeros(p.shape, np.float32)), name=f"scratch.{p.name}")
                                       for p in params])
        self.inner = Adam(list(self.scratch), learning_rate=1.0, eps=eps)
        self.moment1, self.moment2 = self.inner.moment1, self.inner.moment2
        self.beta1_power, self.beta2_power = self.inner.beta1_power, self.inner.beta2_power
        self.global_step = self.inner.global_step
        self.learning_rate = Parameter(Tensor(learning_rates.astype(np.float32)), name="member_learning_rate")
        self.k = int(learning_rates.shape[0])

    def construct(self, gradients):
        done = self.inner(gradients)
        for i in range(len(self.parameters)):
            u = ops.depend(self.scratch[i], done)
            rate = self.learning_rate.reshape((self.k,) + (1,) * (u.ndim - 1))
            ops.assign_add(self.parameters[i], rate * u)
            ops.assign(self.scratch[i], ops.zeros_like(u))
        return done


def stacked_optimizer(pairs, learning_rates: np.ndarray, eps: float):
    """The update phase's optimizer over the stacked Parameters (in the order of ``pairs``):
    msrl's Adam when the members share their learning rate, else MemberRateAdam."""
    params = [s for s, _ in pairs]
    if np.all(learning_rates == learning_rates[0]):
        return Adam(params, learning_rate=float(learning_rates[0]), eps=eps)
    return MemberRateAdam(params, learning_rates, eps)


def _member_slots(pairs: Pairs, member_opt, k: int) -> List[Tuple[int, int]]:
    """(stacked index, member k's optimizer index) of each Parameter of ``pairs``."""
    index = {id(p): i for i, p in enumerate(member_opt.parameters)}
    if len(index) != len(pairs) or any(id(params[k]) not in index for _, params in pairs):
        raise RuntimeError("a member's optimizer holds other Parameters than the population's")
    return [(j, index[id(params[k])]) for j, (_, params) in enumerate(pairs)]


def store_member_state(stacked_opt, member_opt, pairs: Pairs, k: int, per_member_rate: bool) -> None:
    """Member k's optimizer <- its slice of the stacked optimizer's state (moments, step counters,
    learning rate)."""
    for j, i in _member_slots(pairs, member_opt, k):
        member_opt.moment1[i].copy_(Tensor(stacked_opt.moment1[j].asnumpy()[k]))
        member_opt.moment2[i].copy_(Tensor(stacked_opt.moment2[j].asnumpy()[k]))
    for name in ("beta1_power", "beta2_power", "global_step"):
        getattr(member_opt, name).copy_(Tensor(getattr(stacked_opt, name).asnumpy()))
    rate = stacked_opt.learning_rate.asnumpy()
    member_opt.learning_rate.copy_(Tensor(rate[k] if per_member_rate else rate))


def load_stacked_state(stacked_opt, member_opts: Sequence, pairs: Pairs, per_member_rate: bool) -> None:
    """The stacked optimizer's state <- the members' optimizers' states, stacked (the step
    counters are the first member's: the members of a population step together)."""
    slots = [dict(_member_slots(pairs, opt, k)) for k, opt in enumerate(member_opts)]
    for j in range(len(pairs)):
        for name in ("moment1", "moment2"):
            rows = [getattr(opt, name)[slots[k][j]].asnumpy() for k, opt in enumerate(member_opts)]
            getattr(stacked_opt, name)[j].set_data(Tensor(np.stack(rows)))
    for name in ("beta1_power", "beta2_power", "global_step"):
        getattr(stacked_opt, name).set_data(Tensor(getattr(member_opts[0], name).asnumpy()))
    rates = [opt.learning_rate.asnumpy() for opt in member_opts]
    stacked_opt.learning_rate.set_data(Tensor(np.concatenate([r.reshape(-1) for r in rates]) if per_member_rate
                                              else rates[0]))
