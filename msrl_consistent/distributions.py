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


# Generalized State-Dependent Exploration (gSDE, Raffin et al. 2022) ---------------------------
SDE_EPSILON = 1e-6
"""Stable-Baselines3's StateDependentNoiseDistribution epsilon, added to the variance."""


def sde_std(latent_sde, log_std, epsilon: float = SDE_EPSILON):
    """Per-sample action std of gSDE, as SB3's StateDependentNoiseDistribution (full_std,
    exp, no learned features): ``sqrt((latent^2) @ exp(log_std)^2 + epsilon)``.

    latent_sde (batch, latent_dim) is the actor trunk's last hidden output; the caller detaches
    it (``ops.stop_gradient``), as SB3 does with learn_features=False. log_std has shape
    (latent_dim, action_dim)."""
    std = ops.exp(log_std)
    return ops.sqrt(ops.matmul(latent_sde * latent_sde, std * std) + epsilon)


def sde_noise(latent_sde, log_std, eps):
    """The state-dependent noise ``latent @ (exp(log_std) * eps_i)`` of each row i, where eps
    (batch, latent_dim, action_dim) are standard normal exploration matrices from the host:
    exp(log_std) * eps_i is SB3's exploration matrix of env i (``weights_dist.rsample``)."""
    mats = ops.exp(log_std) * eps
    return ops.BatchMatMul()(ops.expand_dims(latent_sde, 1), mats).squeeze(1)


def normal_log_prob(mean, std, x):
    """log N(x; mean, std^2) summed over the last axis, torch.distributions.Normal's formula
    ``-(x - mean)^2 / (2 std^2) - log std - log sqrt(2 pi)``."""
    d = x - mean
    return (-(d * d) / (2.0 * std * std) - ops.log(std) - 0.5 * LOG_2PI).sum(-1)


def normal_entropy(std):
    """Entropy of N(., std^2) summed over the last axis: ``0.5 + 0.5 log(2 pi) + log std``."""
    return (0.5 + 0.5 * LOG_2PI + ops.log(std)).sum(-1)


# Tanh-squashed Gaussian (SAC) ----------------------------------------------------------------
def tanh_gaussian_log_prob(mean, log_std, u):
    """log pi(tanh(u)) = log N(u) - sum log(1 - tanh(u)^2), the stable form
    log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)) (Haarnoja et al. 2018, appendix C)."""
    correction = 2.0 * (LOG_2 - u - ops.softplus(-2.0 * u))
    return gaussian_log_prob(mean, log_std, u) - correction.sum(-1)
