"""Action distributions as graph code (callable inside `construct`).

Sampling noise is an *input* drawn on the host from the run's seeded Generator:
Gumbel noise for Categorical (argmax(logits + g) is an exact sample), standard normal
noise for the Gaussians. The graphs are then pure functions, and a run's randomness is
exactly its Generator's stream.
"""
from __future__ import annotations

import math

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

# the host noise of each distribution: the deployed policy draws the same (deploy.sampling)
from .deploy.sampling import gumbel_noise, logistic_noise, normal_noise

LOG_2PI = math.log(2.0 * math.pi)
LOG_2 = math.log(2.0)


def rows_mean(x, keep_dims: bool = False):
    """The mean over a minibatch's rows: of the whole tensor for one run's (rows,), over the last
    axis for a population's (members, rows): one value per member."""
    if x.ndim == 1:
        return x.mean()
    return x.mean(-1, keep_dims=keep_dims)


def rows_max(x):
    """rows_mean's maximum: of the whole tensor for one run's rows, one per member for a population's."""
    if x.ndim == 1:
        return x.max()
    return x.max(-1)


# Categorical ---------------------------------------------------------------------------
def categorical_log_prob(logits, actions):
    """log pi(a|s) for integer actions (int32): log_softmax, then the actions' entries gathered (one
    kernel; the same values, and the same gradient, as the log_softmax masked by a one-hot and summed)."""
    logp = ops.log_softmax(logits, -1)
    return ops.gather_elements(logp, logits.ndim - 1, actions.expand_dims(-1)).squeeze(-1)


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


# PPO's action distributions, behind one interface ----------------------------------------------
class Distribution(nn.Cell):
    """The action distribution of an on-policy agent, chosen once from the action space
    (:func:`action_distribution`), so the rollout and loss graphs never branch on the action kind.

    ``params`` is the tuple ``(out, latent, log_std)`` the agent computes (``dist_params``): the
    actor's output (logits or the Gaussian mean), gSDE's latent features (None otherwise) and the
    agent's log std Parameter (None for discrete actions). The distribution holds no Parameter of
    its own: the agent's parameters keep their names and their one owner.

    * ``noise(rng, n)`` (host): the noise ``sample`` consumes for ``n`` rows, from the run's Generator;
    * ``sample(params, noise)`` -> (environment action, action, log_prob);
    * ``log_prob_entropy(params, actions)`` -> (log_prob, the batch mean of the entropy): one
      evaluation for both, so a quantity they share (gSDE's std) is one node of the gradient graph;
    * ``mode(out)``: the deterministic action in environment units, what the exported head outputs.
    """

    def noise(self, rng, n: int) -> np.ndarray:
        raise NotImplementedError

    def sample(self, params, noise):
        raise NotImplementedError

    def log_prob_entropy(self, params, actions):
        raise NotImplementedError

    def mode(self, out):
        raise NotImplementedError


class Categorical(Distribution):
    """A Discrete action: sampled by Gumbel-max, the mode the argmax (int32)."""

    def __init__(self, n: int):
        super().__init__()
        self.n = int(n)

    def noise(self, rng, n: int) -> np.ndarray:
        return gumbel_noise(rng, (n, self.n))

    def sample(self, params, noise):
        logits, _, _ = params
        action = categorical_sample(logits, noise)
        return action, action, categorical_log_prob(logits, action)

    def log_prob_entropy(self, params, actions):
        logits, _, _ = params
        return categorical_log_prob(logits, actions), rows_mean(categorical_entropy(logits))

    def mode(self, out):
        return ops.cast(ops.argmax(out, -1), ms.int32)


class _Box(Distribution):
    """A Box action: the sample goes to the environment clipped to the bounds (as Stable-Baselines3);
    the loss and the stored action use the sample itself."""

    def __init__(self, low, high):
        super().__init__()
        self.low = Tensor(np.asarray(low, np.float32))
        self.high = Tensor(np.asarray(high, np.float32))

    def mode(self, out):
        return ops.clip_by_value(out, self.low, self.high)


class Gaussian(_Box):
    """A diagonal Gaussian with a state-independent log std (one value per action dimension)."""

    def __init__(self, low, high):
        super().__init__(low, high)
        self.n = int(np.asarray(low).shape[0])

    def noise(self, rng, n: int) -> np.ndarray:
        return normal_noise(rng, (n, self.n))

    def sample(self, params, noise):
        mean, _, log_std = params
        action = mean + ops.exp(log_std) * noise
        return ops.clip_by_value(action, self.low, self.high), action, gaussian_log_prob(mean, log_std, action)

    def log_prob_entropy(self, params, actions):
        mean, _, log_std = params
        entropy = gaussian_entropy(log_std)
        if entropy.ndim:  # a population's log std (members, 1, actions): one entropy per member
            entropy = entropy.squeeze(-1)
        return gaussian_log_prob(mean, log_std, actions), entropy


class StateDependentGaussian(_Box):
    """gSDE (SB3's StateDependentNoiseDistribution, full_std, learn_features=False): the noise is
    ``latent @ (exp(log_std) * eps)`` with the latent features detached and eps one standard normal
    (latent_dim, action_dim) matrix per row; the per-row std is :func:`sde_std`."""

    def __init__(self, low, high, log_std_shape):
        super().__init__(low, high)
        self.log_std_shape = tuple(int(d) for d in log_std_shape)

    def noise(self, rng, n: int) -> np.ndarray:
        return normal_noise(rng, (n,) + self.log_std_shape)

    def sample(self, params, noise):
        mean, latent, log_std = params
        latent = ops.stop_gradient(latent)
        action = mean + sde_noise(latent, log_std, noise)
        log_prob = normal_log_prob(mean, sde_std(latent, log_std), action)
        return ops.clip_by_value(action, self.low, self.high), action, log_prob

    def log_prob_entropy(self, params, actions):
        mean, latent, log_std = params
        std = sde_std(ops.stop_gradient(latent), log_std)
        return normal_log_prob(mean, std, actions), normal_entropy(std).mean()


class _PerDimension(Distribution):
    """Independent discrete dimensions (int32 actions (B, dims)): ``draw``, ``log_prob`` and
    ``entropy`` per row, given the logits."""

    def sample(self, params, noise):
        logits, _, _ = params
        action = self.draw(logits, noise)
        return action, action, self.log_prob(logits, action)

    def log_prob_entropy(self, params, actions):
        logits, _, _ = params
        return self.log_prob(logits, actions), self.entropy(logits).mean()


class MultiCategorical(_PerDimension):
    """Independent categoricals over the logit segments of ``nvec`` (SB3's MultiCategorical):
    log_prob and entropy are sums over the dimensions; each dimension samples by Gumbel-max.

    Vectorized, no per-dimension loop (MindSpore's ONNX writer has no list operator): the logits
    (B, sum(nvec)) are gathered into a padded (B, dims, max(nvec)) block whose padding holds
    ``PAD`` (-1e9: probability exactly 0 in float32, and no inf * 0 NaN in the entropy), so one
    ArgMax / log_softmax over the last axis serves every dimension."""

    PAD = -1e9

    def __init__(self, nvec):
        super().__init__()
        self.nvec = tuple(int(n) for n in nvec)
        self.dims, self.width = len(self.nvec), max(self.nvec)
        idx = np.zeros((self.dims, self.width), np.int32)
        pad = np.zeros((self.dims, self.width), np.float32)
        start = 0
        for i, n in enumerate(self.nvec):
            idx[i, :n] = np.arange(start, start + n)
            idx[i, n:] = start  # any valid column; masked below
            pad[i, n:] = self.PAD
            start += n
        self.idx = Tensor(idx.reshape(-1))
        self.pad = Tensor(pad)

    def noise(self, rng, n: int):
        return gumbel_noise(rng, (n, int(sum(self.nvec))))

    def padded(self, x):
        """(B, sum(nvec)) -> (B, dims, max(nvec)), padding PAD."""
        return ops.gather(x, self.idx, 1).reshape((-1, self.dims, self.width)) + self.pad

    def draw(self, logits, noise):
        return ops.Argmax(axis=-1, output_type=ms.int32)(self.padded(logits + noise))

    def mode(self, logits):
        return ops.cast(ops.argmax(self.padded(logits), -1), ms.int32)

    def log_prob(self, logits, actions):
        logp = ops.log_softmax(self.padded(logits), -1)
        onehot = ops.one_hot(actions, self.width, ops.ones((), ms.float32), ops.zeros((), ms.float32))
        return (logp * onehot).sum(-1).sum(-1)

    def entropy(self, logits):
        logp = ops.log_softmax(self.padded(logits), -1)
        return -(ops.exp(logp) * logp).sum(-1).sum(-1)


class Bernoulli(_PerDimension):
    """Independent Bernoullis with p = sigmoid(logit) per dimension (SB3's BernoulliDistribution).
    A sample is ``logit + L > 0`` with L = log(u) - log(1 - u) logistic noise from the host (an
    exact Bernoulli(sigmoid(logit)) sample); the mode is ``logit > 0`` (p > 0.5)."""

    def __init__(self, n: int):
        super().__init__()
        self.n = int(n)

    def noise(self, rng, n: int):
        return logistic_noise(rng, (n, self.n))

    def draw(self, logits, noise):
        return ops.cast(logits + noise > 0.0, ms.int32)

    def mode(self, logits):
        return ops.cast(logits > 0.0, ms.int32)

    def log_prob(self, logits, actions):
        # a * log sigmoid(l) + (1 - a) * log sigmoid(-l) = a * l - softplus(l)
        return (ops.cast(actions, ms.float32) * logits - ops.softplus(logits)).sum(-1)

    def entropy(self, logits):
        # -(p log p + (1 - p) log(1 - p)) = softplus(l) - p * l
        return (ops.softplus(logits) - ops.sigmoid(logits) * logits).sum(-1)


def action_distribution(spec, sde_log_std_shape=None) -> Distribution:
    """The distribution of an action space (SpaceSpec): Categorical, MultiCategorical, Bernoulli,
    or for a Box a Gaussian, state-dependent (gSDE) when ``sde_log_std_shape`` is given."""
    if spec.act_kind == "MultiDiscrete":
        return MultiCategorical(spec.nvec)
    if spec.act_kind == "MultiBinary":
        return Bernoulli(spec.n_actions)
    if spec.discrete:
        return Categorical(spec.n_actions)
    if sde_log_std_shape is not None:
        return StateDependentGaussian(spec.act_low, spec.act_high, sde_log_std_shape)
    return Gaussian(spec.act_low, spec.act_high)
