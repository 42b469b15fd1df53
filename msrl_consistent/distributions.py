"""Action distributions as graph code (callable inside `construct`).

Sampling noise is an *input* drawn on the host from the run's seeded Generator:
Gumbel noise for Categorical (argmax(logits + g) is an exact sample), standard normal
noise for the Gaussians. The graphs are then pure functions, and a run's randomness is
exactly its Generator's stream.
"""
from __future__ import annotations

import math

import mindspore as ms
from mindspore import ops

LOG_2PI = math.log(2.0 * math.pi)
LOG_2 = math.log(2.0)


# Categorical ---------------------------------------------------------------------------
def categorical_log_prob(logits, actions, n_actions: int):
    """log pi(a|s) for integer actions (int32), via log_softmax and a one-hot mask."""
    logp = ops.log_softmax(logits, -1)
    onehot = ops.one_hot(actions, n_actions, ops.ones((), ms.float32), ops.zeros((), ms.float32))
    return (logp * onehot).sum(-1)


def categorical_entropy(logits):
    logp = ops.log_softmax(logits, -1)
    return -(ops.exp(logp) * logp).sum(-1)


def categorical_sample(logits, gumbel):
    """Gumbel-max sample: argmax(logits + g), g ~ Gumbel(0, 1) from the host."""
    return ops.Argmax(axis=-1, output_type=ms.int32)(logits + gumbel)


# Diagonal Gaussian -----------------------------------------------------------------------
def gaussian_log_prob(mean, log_std, x):
    z = (x - mean) / ops.exp(log_std)
    return (-0.5 * z * z - log_std - 0.5 * LOG_2PI).sum(-1)


def gaussian_entropy(log_std):
    """Entropy of N(mean, exp(log_std)^2) summed over action dims (independent of the mean)."""
    return (log_std + 0.5 + 0.5 * LOG_2PI).sum(-1)


# Tanh-squashed Gaussian (SAC) ----------------------------------------------------------------
def tanh_gaussian_log_prob(mean, log_std, u):
    """log pi(tanh(u)) = log N(u) - sum log(1 - tanh(u)^2), the stable form
    log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)) (Haarnoja et al. 2018, appendix C)."""
    correction = 2.0 * (LOG_2 - u - ops.softplus(-2.0 * u))
    return gaussian_log_prob(mean, log_std, u) - correction.sum(-1)
