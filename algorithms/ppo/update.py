"""PPO's compiled update: one minibatch step (loss, gradients, the ranks' mean, clipping, Adam)
and the whole update phase (every epoch and minibatch) in one graph call, with the host-side
minibatch indices and target_kl threshold they take."""
from __future__ import annotations

import math
from typing import Optional

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.ops.operations._grad_ops import LogSoftmaxGrad

from msrl_consistent.distributions import rows_max, rows_mean
from msrl_consistent.networks.stacked import WriteBack

from ..cells import GradNormClip, RankMean


class PPOTrainStep(nn.Cell):
    """One minibatch: loss, gradients, (data parallel: the ranks' mean gradient), global-norm
    clipping and the Adam step -> the stats of STAT_NAMES, shape (9,); for a population's loss
    (``members``: its networks carry a leading member axis) each member's, shape (members, 9).

    The clipping is torch's ``clip_grad_norm_`` (cells.GradNormClip), its global norm reported as
    grad_norm; a population's members each over their own slices (``max_grad_norm`` one value
    per member). The members' loss is the sum of their losses, so each member's gradient is its
    own loss's. target_kl as Stable-Baselines3: the approx KL is computed by the forward pass,
    before the step; above ``kl_threshold`` the step is not applied (data parallel: the ranks'
    mean KL decides, the same on every rank)."""

    def __init__(self, loss: nn.Cell, optimizer: nn.Optimizer, max_grad_norm, world: int = 1,
                 early_stop: bool = True, members: Optional[int] = None):
        super().__init__()
        self.optimizer = optimizer
        self.k = members
        # without target_kl (threshold +inf) every step is applied: no `if` in the graph (fewer kernels)
        self.early_stop = early_stop
        self.grad_fn = ops.value_and_grad(loss if members is None else MembersTotal(loss), None,
                                          optimizer.parameters, has_aux=True)
        self.clip = GradNormClip(max_grad_norm, members)
        # Data parallel (msrun): average gradients over ranks before clipping, in the same graph.
        self.distributed = world > 1
        self.rank_mean = RankMean(optimizer.parameters, world)
        if self.distributed:
            self.all_reduce = ops.AllReduce()
            self.world = float(world)

    def construct(self, clip_range, clip_range_vf, kl_threshold, *data):
        """``data``: the minibatch's arrays in the loss's order (PPOLoss: obs, actions, old
        log-probs, advantages, returns, old values; the recurrent loss adds its sequences' episode
        starts and initial state)."""
        out, grads = self.grad_fn(*data, clip_range, clip_range_vf)
        if self.k is None:
            loss, pg, vl, ent, kl, cf, dlp, dr = out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]
        else:  # the members' total (depended upon: an unused output of the gradient call warns), then theirs
            loss, pg, vl, ent, kl, cf, dlp, dr = (ops.depend(out[1], out[0]), out[2], out[3], out[4], out[5], out[6],
                                                  out[7], out[8])
        grads = self.rank_mean(grads)
        if self.distributed:
            kl = self.all_reduce(kl) / self.world
        norm = self.clip.norm(grads)
        if self.early_stop:
            if kl <= kl_threshold:
                self.optimizer(self.clip(grads, norm))
        else:
            self.optimizer(self.clip(grads, norm))
        if self.k is None:
            return ops.stack([loss, pg, vl, ent, kl, cf, norm.reshape(()), dlp, dr])
        return ops.stack([loss, pg, vl, ent, kl, cf, norm, dlp, dr]).transpose(1, 0)


class MembersTotal(nn.Cell):
    """A population's loss -> (the sum of the members' losses, then the loss's own outputs): the
    gradient of the sum is each member's gradient of its own loss."""

    def __init__(self, loss: nn.Cell):
        super().__init__()
        self.loss = loss

    def construct(self, *args):
        out = self.loss(*args)
        return out[0].sum(), out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]


def rows_sum(x, keep_dims: bool = False):
    """distributions.rows_mean's sum."""
    if x.ndim == 1:
        return x.sum()
    return x.sum(-1, keepdims=keep_dims)


def coefficient(value):
    """A loss coefficient in the graph: the config's float for one run, a Tensor (members,) of
    the members' values for a population."""
    if np.ndim(value) == 0:
        return float(value)
    return Tensor(np.asarray(value, np.float32))


class ClippedObjective(nn.Cell):
    """PPO's objective from the loss's forward pass: (values, log-probs, entropy) of a minibatch
    and its rollout arrays -> (loss, policy loss, value loss, entropy, approx KL, clip fraction,
    max |log-ratio|, max |ratio - 1|). The last two and the approx KL (the k3 estimator of the
    KL between the rollout's and the update's probabilities) are, on the phase's first minibatch,
    which the update computes with the parameters that acted, the rollout/update mismatch: zero
    where the two graphs compute the same log-probabilities (``mismatch``).

    Advantages normalized per minibatch (unbiased std, as torch.std; skipped for one sample, as
    SB3), the clipped surrogate, optional value clipping around the old values. With
    ``ent_coef == 0`` the entropy is reported but not differentiated (``pg - 0 * ent`` is
    ``pg``: the same parameters, one gradient branch fewer). A population's arrays carry a
    leading member axis: every quantity is then one per member (rows_mean), and ``coefs`` holds
    the members' ent_coef and vf_coef (a sweep may vary them)."""

    def __init__(self, c, coefs: Optional[dict] = None):
        super().__init__()
        coefs = coefs or {}
        ent_coef, vf_coef = coefs.get("ent_coef", c.ent_coef), coefs.get("vf_coef", c.vf_coef)
        self.normalize_advantage = c.normalize_advantage
        self.clip_vf = c.clip_range_vf is not None
        self.use_ent = bool(np.any(np.asarray(ent_coef) != 0.0))
        self.ent_coef = coefficient(ent_coef)
        self.vf_coef = coefficient(vf_coef)

    def normalized(self, advantages):
        n = advantages.shape[-1]
        if self.normalize_advantage and n > 1:
            centered = advantages - rows_mean(advantages, True)
            std = ops.sqrt(rows_sum(centered * centered, True) / (n - 1))
            return centered / (std + 1e-8)
        return advantages

    def construct(self, values, log_prob, entropy, old_log_prob, advantages, returns, old_values, clip_range,
                  clip_range_vf):
        advantages = self.normalized(advantages)
        log_ratio = log_prob - old_log_prob
        ratio = ops.exp(log_ratio)
        clipped_ratio = ops.clip_by_value(ratio, 1.0 - clip_range, 1.0 + clip_range)
        policy_loss = -rows_mean(ops.minimum(advantages * ratio, advantages * clipped_ratio))
        if self.clip_vf:
            values = old_values + ops.clip_by_value(values - old_values, -clip_range_vf, clip_range_vf)
        value_loss = rows_mean((returns - values) ** 2)
        if self.use_ent:
            loss = policy_loss - self.ent_coef * entropy + self.vf_coef * value_loss
        else:
            loss = policy_loss + self.vf_coef * value_loss
        approx_kl = rows_mean((ratio - 1.0) - log_ratio)  # http://joschu.net/blog/kl-approx.html
        clip_fraction = rows_mean((ops.abs(ratio - 1.0) > clip_range).astype(ms.float32))
        return (loss, policy_loss, value_loss, entropy, approx_kl, clip_fraction, rows_max(ops.abs(log_ratio)),
                rows_max(ops.abs(ratio - 1.0)))


class CategoricalClippedHead(nn.Cell):
    """ClippedObjective's forward for a Categorical policy without entropy bonus or value clipping,
    from the logits and values, with its backward written out: the terms autodiff evaluates,
    in fewer kernels (the minibatch time: docs/benchmarks.md; the log-softmax's gradient is
    the same LogSoftmaxGrad kernel autodiff uses). For a minibatch of n rows, n a power of two, the
    gradients equal autodiff's bit for bit: every factor besides the advantage, the ratio and
    vf_coef is a power of two, so each gradient element is one rounding of the same exact
    product in either order (PPOLoss uses this head only then):

    - d/dlog pi(a) = -(A * r) / n where A * r <= A * clip(r) (the minimum's gradient, the ratio's
      exp), else 0 (the clip passes no gradient outside its range);
    - d/dlogits = LogSoftmaxGrad(log_softmax, onehot(a) * that);
    - d/dvalues = (v - R) * (2 * vf_coef / n).

    ``per_member``: a population's (members, rows) tensors (PPOLoss on a MembersAgent), means
    over the rows, one vf_coef per member. Returns ClippedObjective's eight outputs (per member:
    each of shape (members,)), then the tensors the backward reads."""

    def __init__(self, n_actions: int, vf_coef, per_member: bool = False):
        super().__init__()
        self.n_actions = int(n_actions)
        self.per_member = per_member
        # d(vf_coef * (R - v)^2)/dv = value_grad * (v - R); 2 * vf_coef is exact in float32
        if per_member:
            vf = np.asarray(vf_coef, np.float32)
            self.vf_coef = Tensor(vf)
            self.value_grad = Tensor((vf * 2).reshape((-1, 1)))
        else:
            self.vf_coef = float(vf_coef)
            self.value_grad = float(np.float32(vf_coef)) * 2.0
        self.log_softmax_grad = LogSoftmaxGrad(-1)

    def mean(self, x):
        return x.mean(-1) if self.per_member else x.mean()

    def construct(self, logits, values, actions, old_log_prob, advantages, returns, clip_range):
        logp_all = ops.log_softmax(logits, -1)
        log_prob = ops.gather_elements(logp_all, logits.ndim - 1, actions.expand_dims(-1)).squeeze(-1)
        log_ratio = log_prob - old_log_prob
        ratio = ops.exp(log_ratio)
        clipped_ratio = ops.clip_by_value(ratio, 1.0 - clip_range, 1.0 + clip_range)
        a_r = advantages * ratio
        a_c = advantages * clipped_ratio
        policy_loss = -self.mean(ops.minimum(a_r, a_c))
        value_loss = self.mean((returns - values) ** 2)
        loss = policy_loss + self.vf_coef * value_loss
        entropy = self.mean(-(ops.exp(logp_all) * logp_all).sum(-1))
        approx_kl = self.mean((ratio - 1.0) - log_ratio)
        clip_fraction = self.mean((ops.abs(ratio - 1.0) > clip_range).astype(ms.float32))
        return (loss, policy_loss, value_loss, entropy, approx_kl, clip_fraction, rows_max(ops.abs(log_ratio)),
                rows_max(ops.abs(ratio - 1.0)), logp_all, a_r, a_c)

    def bprop(self, logits, values, actions, old_log_prob, advantages, returns, clip_range, out, dout):
        logp_all, a_r, a_c = out[8], out[9], out[10]
        n = a_r.shape[-1]
        sens = dout[0]  # the loss's; the other outputs are statistics (no gradient)
        if self.per_member:
            sens = sens.expand_dims(-1)
        g = ops.select(a_r <= a_c, a_r, ops.zeros_like(a_r)) * (sens * (-1.0 / n))
        onehot = ops.one_hot(actions, self.n_actions, ops.ones((), ms.float32), ops.zeros((), ms.float32))
        dlogits = self.log_softmax_grad(logp_all, onehot * g.expand_dims(-1))
        dvalues = (values - returns) * (sens * (self.value_grad / n))
        return (dlogits, dvalues, ops.zeros_like(actions), ops.zeros_like(old_log_prob), ops.zeros_like(advantages),
                ops.zeros_like(returns), ops.zeros_like(clip_range))


def power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


class PPOUpdatePhase(nn.Cell):
    """Every epoch and minibatch of one update phase in one graph call.

    Inputs: the minibatch indices of the whole phase (drawn on the host from
    the run's Generator exactly as the per-minibatch loop draws them: one permutation per epoch,
    consecutive slices of batch_size) as ``full`` (n_epochs * full minibatches per epoch,
    batch_size) and, when the rollout is not a multiple of batch_size, ``tail`` (n_epochs, rest)
    for each epoch's shorter last minibatch; the learning rate, clip ranges and the target_kl
    threshold; then the rollout arrays in the loss's order, indexed on their first axis (rows;
    a recurrent policy's envs). A native ``while`` over a Tensor counter compiles to a real loop whose body is
    PPOTrainStep (a Python range would unroll); a Tensor ``if`` chooses the full-size or the
    tail-size step, each with its own static shapes, so every minibatch runs exactly the graph
    the per-minibatch loop runs (parameters bit-identical, tested). With target_kl, the
    minibatch whose approx KL exceeds the threshold is not applied and ends the phase.
    Returns (stats (minibatches, 9), minibatches evaluated); rows past the stop are zero.

    A population's step (``step.k`` members) takes the members' rollouts one after another,
    (members * rows) rows; its minibatch indices are member k's drawn from its own Generator,
    offset to its rows and side by side (members * batch_size per minibatch), so each minibatch
    is cut into (members, batch_size) rows. At the end of the phase every member's slice of the
    stacked Parameters is written into the member's own (``pairs``: networks.stacked.WriteBack).
    Its stats are (minibatches, members, 9).
    """

    def __init__(self, step: PPOTrainStep, n_epochs: int, rollout: int, batch_size: int, pairs=None):
        super().__init__()
        self.step = step
        self.optimizer = step.optimizer
        self.k = step.k
        self.stat_shape = (9,) if self.k is None else (self.k, 9)
        self.per_epoch = rollout // batch_size  # full-size minibatches per epoch
        self.ragged = rollout % batch_size != 0  # every epoch ends with a shorter minibatch
        self.per_epoch_all = self.per_epoch + (1 if self.ragged else 0)
        self.total = n_epochs * self.per_epoch_all
        self.early_stop = step.early_stop
        self.write_back = None if pairs is None else WriteBack(pairs)

    def minibatch(self, b, clip_range, clip_range_vf, kl_threshold, data):
        rows = [ops.gather(d, b, 0) for d in data]
        if self.k is not None:
            rows = [r.reshape((self.k, -1) + r.shape[1:]) for r in rows]
        return self.step(clip_range, clip_range_vf, kl_threshold, *rows)

    def construct(self, full, tail, learning_rate, clip_range, clip_range_vf, kl_threshold, *data):
        # In the graph: a graph with a loop does not see a host-side set_data on this Parameter.
        ops.assign(self.optimizer.learning_rate, learning_rate)
        stats = ops.zeros((self.total,) + self.stat_shape, ms.float32)
        k = ops.zeros((), ms.int32)  # minibatch counter
        e = ops.zeros((), ms.int32)  # epoch
        p = ops.zeros((), ms.int32)  # position in the epoch
        n_run = ops.zeros((), ms.int32)
        while k < self.total:
            if self.ragged:  # a constant: only one of the two bodies is compiled
                if p < self.per_epoch:
                    s = self.minibatch(full[e * self.per_epoch + p], clip_range, clip_range_vf, kl_threshold, data)
                else:
                    s = self.minibatch(tail[e], clip_range, clip_range_vf, kl_threshold, data)
                last = p == self.per_epoch
                e = ops.select(last, e + 1, e)
                p = ops.select(last, p * 0, p + 1)
            else:
                s = self.minibatch(full[k], clip_range, clip_range_vf, kl_threshold, data)
            stats = ops.tensor_scatter_update(stats, k.reshape((1, 1)), s.reshape((1,) + self.stat_shape))
            n_run = k + 1
            if self.early_stop:
                k = ops.select(s[4] > kl_threshold, k * 0 + self.total, k + 1)
            else:
                k = k + 1
        if self.write_back is not None:
            stats = ops.depend(stats, self.write_back(stats))
        return stats, n_run


def kl_threshold(target_kl: Optional[float]) -> float:
    """The float32 t with ``kl > t`` exactly when ``float(kl) > 1.5 * target_kl`` in float64 (SB3's
    test) for every float32 kl: 1.5 * target_kl rounded toward -inf. +inf without target_kl."""
    if target_kl is None:
        return math.inf
    thr = 1.5 * float(target_kl)
    t = np.float32(thr)
    if float(t) > thr:
        t = np.nextafter(t, np.float32(-np.inf))
    return float(t)


def minibatch_indices(rng: np.random.Generator, n: int, batch_size: int, n_epochs: int):
    """The minibatch indices of one phase, drawn as the per-minibatch loop draws them (one
    permutation per epoch, consecutive slices of batch_size): (full, tail) as PPOUpdatePhase
    takes them; when batch_size divides n, tail is an unused (n_epochs, 1) placeholder."""
    f = n // batch_size
    perms = [rng.permutation(n) for _ in range(n_epochs)]
    full = np.concatenate([p[:f * batch_size].reshape(f, batch_size) for p in perms]).astype(np.int32)
    if n % batch_size:
        tail = np.stack([p[f * batch_size:] for p in perms]).astype(np.int32)
    else:
        tail = np.zeros((n_epochs, 1), np.int32)
    return full, tail


STAT_NAMES = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm")
"""The stats averaged over an update phase's minibatches; each row of PPOTrainStep's stats then has
max |log-ratio| and max |ratio - 1| (read on the first minibatch only: ``mismatch``)."""


def phase_stats(stats: np.ndarray) -> dict:
    """An update phase's stats (minibatches, 9) of one run or one member: the means of STAT_NAMES
    over the minibatches, and the rollout/update mismatch from the first minibatch, which the
    update computes with the parameters that acted: max |delta log-prob|, the mean k3 estimator
    exp(d) - 1 - d (the approx KL) and max |ratio - 1|; ``mismatch_max`` is the first."""
    res = {k: float(v) for k, v in zip(STAT_NAMES, np.mean(stats[:, :len(STAT_NAMES)], axis=0))}
    first = stats[0]
    res.update(mismatch_max=float(first[7]), mismatch_k3=float(first[4]), mismatch_max_ratio=float(first[8]))
    return res


def explained_variance(returns: np.ndarray, values: np.ndarray) -> float:
    """1 - Var(returns - values) / Var(returns) of one rollout (SB3's explained_variance; NaN
    when the returns do not vary)."""
    var_ret = np.var(returns)
    return float(1.0 - np.var(returns - values) / var_ret) if var_ret else float("nan")
