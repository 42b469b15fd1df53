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
