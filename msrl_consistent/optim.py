"""Adam with PyTorch's epsilon placement, on MindSpore's fused Adam kernel.

MindSpore's ``nn.Adam`` (its Adam op) updates ``p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``:
epsilon is added to the *uncorrected* sqrt(v). PyTorch (and so Stable-Baselines3 and every
recipe tuned with it) adds it to the bias-corrected one, ``p -= lr / (1 - b1^t) * m / (sqrt(v) /
sqrt(1 - b2^t) + eps)``, which is the same as MindSpore's update with ``eps * sqrt(1 - b2^t)`` in
place of ``eps``. With MindSpore's form the effective epsilon is 31.6x PyTorch's at step 1, 3.2x
at step 100 and 1.26x at step 1000 (b2 = 0.999), which damps early updates, most with PPO's
``adam_eps: 1e-5``. :class:`Adam` passes ``eps * sqrt(1 - b2^t)`` to the same fused kernel: two
scalar ops per step more, nothing per parameter.
"""
from __future__ import annotations

import contextlib
import logging

from mindspore import nn, ops

_step = ops.MultitypeFuncGraph("msrl_adam_step")


@_step.register("Function", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor",
                "Tensor", "Tensor", "Tensor", "Tensor")
def _apply(opt, beta1_power, beta2_power, beta1, beta2, eps, lr, gradient, param, moment1, moment2):
    return ops.depend(True, opt(param, moment1, moment2, beta1_power, beta2_power, lr, beta1, beta2, eps, gradient))


class Adam(nn.Adam):
    """``nn.Adam`` (same Parameters, state names and checkpoints) with PyTorch's epsilon.

    Plain Adam only: one learning rate for all parameters, no weight decay, no loss scale,
    no lazy, offload or AMSGrad variants."""

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
        with _without_sparse_adam_notice():
            super().__init__(params, learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps)
        self.hyper = ops.HyperMap()

    def construct(self, gradients):
        lr = self.get_lr()
        self.assignadd(self.global_step, self.global_step_increase_tensor)
        beta1_power = self.beta1_power * self.beta1
        self.beta1_power = beta1_power
        beta2_power = self.beta2_power * self.beta2
        self.beta2_power = beta2_power
        eps = self.eps * ops.sqrt(1.0 - beta2_power)
        return self.hyper(ops.partial(_step, self.opt, beta1_power, beta2_power, self.beta1, self.beta2, eps, lr),
                          gradients, self._parameters, self.moment1, self.moment2)


class _DropSparseAdamNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "'FusedSparseAdam' is deprecated" not in record.getMessage()


@contextlib.contextmanager
def _without_sparse_adam_notice():
    """``nn.Adam.__init__`` always builds a ``FusedSparseAdam`` primitive for sparse gradients, and
    MindSpore 2.8+ logs that it is deprecated on every user's console. This Adam never takes the
    sparse path (dense gradients only), so that one notice is filtered on MindSpore's logger while
    the base class is built; every other message passes. (``mindspore.log`` has no public accessor
    for its logger; without it, the notice simply shows.)"""
    from mindspore import log as ms_log

    get = getattr(ms_log, "_get_logger", None)
    logger = get() if callable(get) else None
    notice = _DropSparseAdamNotice()
    if logger is not None:
        logger.addFilter(notice)
    try:
        yield
    finally:
        if logger is not None:
            logger.removeFilter(notice)
