"""A policy's whole action distribution on the deploying side: what a distribution export's extra
graph outputs mean (the manifest's ``io.distribution``), the noise training draws for them, the
sampling formula training uses, and the KL divergence ``msrl verify`` and ``python policy.py
check`` report between the training cell's distribution and a backend's.

The kinds and their graph outputs after the action (float32, one row per observation):

* ``categorical``, ``multi_categorical``, ``bernoulli``: ``logits`` (a MultiDiscrete space's
  segments laid end to end, as ``nvec``);
* ``gaussian`` (PPO's Box actions): ``mean``, ``std`` (exp of the log std, by the graph's own Exp);
* ``state_dependent_gaussian`` (gSDE): ``mean``, ``std`` (the row's state-dependent std),
  ``latent`` (the features the exploration matrices multiply); the matrices' scale exp(log std)
  is a constant of the policy, recorded as ``io.distribution.sde_scale``;
* ``squashed_gaussian`` (SAC): the pre-squash ``mean`` and ``std``; the action is the tanh of the
  sample, mapped to the Box.

Sampling takes the noise training takes (the same draws from a NumPy Generator: ``noise``) and
applies training's formula in float32: argmax(logits + Gumbel), logit + logistic noise > 0,
mean + std * noise clipped to the Box. The same noise then gives the same action as the
training cell, bit for bit where the formula is one IEEE operation per element (the discrete
kinds and the Gaussian); gSDE's matrix product and SAC's tanh are float32 roundings apart.
NumPy only, as the rest of the deploy package.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from .errors import ExportError
from .fields import _Fields, _short
from .names import MANIFEST

OUTPUTS = {"categorical": ("logits",), "multi_categorical": ("logits",), "bernoulli": ("logits",),
           "gaussian": ("mean", "std"), "state_dependent_gaussian": ("mean", "std", "latent"),
           "squashed_gaussian": ("mean", "std")}
"""Each kind's graph outputs after the action, in order."""
KL_TOLERANCE = 1e-6
"""The largest per-row KL(training cell || backend) a check passes (nats): float32 rounding of the
outputs gives ~1e-12; a wrong scale, a missing normalization or an fp16 logit is far above."""
GOLDEN_PREFIX = "dist_"
"""golden.npz holds the training cell's outputs as ``dist_<output>``."""


def gumbel_noise(rng: np.random.Generator, shape) -> np.ndarray:
    """Gumbel(0, 1) noise: argmax(logits + g) is an exact categorical sample."""
    u = rng.random(shape)
    return (-np.log(-np.log(np.clip(u, 1e-12, 1.0 - 1e-7)))).astype(np.float32)


def logistic_noise(rng: np.random.Generator, shape) -> np.ndarray:
    """Logistic noise log(u) - log(1 - u): logit + L > 0 is an exact Bernoulli(sigmoid(logit)) sample."""
    u = np.clip(rng.random(shape), 1e-12, 1.0 - 1e-7)
    return (np.log(u) - np.log1p(-u)).astype(np.float32)


def normal_noise(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def output_widths(kind: str, spec, latent: int = 0) -> List[int]:
    """The width of each of a kind's outputs for a SpaceSpec (``latent``: gSDE's latent features)."""
    n = int(spec.logits_dim) if kind == "multi_categorical" else int(spec.n_actions)
    return [latent if name == "latent" else n for name in OUTPUTS[kind]]


def distribution_io(kind: str, spec, batch: Optional[int], sde_scale: Optional[np.ndarray] = None) -> dict:
    """The manifest's ``io.distribution`` section (``batch`` None: dynamic)."""
    latent = 0 if sde_scale is None else int(np.asarray(sde_scale).shape[0])
    io = {"kind": kind, "outputs": [{"name": name, "shape": [batch, w], "dtype": "float32"}
                                    for name, w in zip(OUTPUTS[kind], output_widths(kind, spec, latent))],
          "kl_tolerance": KL_TOLERANCE}
    if sde_scale is not None:
        io["sde_scale"] = np.asarray(sde_scale, np.float32).tolist()
    return io


def kinds_of(spec) -> tuple:
    """The distribution kinds an action space can have."""
    return {"Discrete": ("categorical",), "MultiDiscrete": ("multi_categorical",), "MultiBinary": ("bernoulli",),
            "Box": ("gaussian", "state_dependent_gaussian", "squashed_gaussian")}.get(spec.act_kind, ())


class Distribution:
    """The action distribution of a distribution export (or of the training cell): ``noise``,
    ``sample`` and ``kl`` by training's formulas."""

    def __init__(self, kind: str, spec, sde_scale: Optional[np.ndarray] = None):
        self.kind, self.spec = kind, spec
        self.outputs = OUTPUTS[kind]
        self.sde_scale = None if sde_scale is None else np.asarray(sde_scale, np.float32)
        self.tolerance = KL_TOLERANCE
        if kind == "multi_categorical":
            self.starts = np.concatenate([[0], np.cumsum(spec.nvec)]).astype(int)
        if not spec.discrete:
            self.low = np.asarray(spec.act_low, np.float32)
            self.high = np.asarray(spec.act_high, np.float32)

    def noise(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """The noise training draws for ``n`` rows, from ``rng``."""
        if self.kind == "bernoulli":
            return logistic_noise(rng, (n, self.spec.n_actions))
        if self.kind in ("categorical", "multi_categorical"):
            return gumbel_noise(rng, (n, self.spec.logits_dim))
        if self.sde_scale is not None:  # gSDE: one (latent, actions) matrix per row
            return normal_noise(rng, (n,) + self.sde_scale.shape)
        return normal_noise(rng, (n, self.spec.n_actions))

    def sample(self, params: Dict[str, np.ndarray], noise: np.ndarray) -> np.ndarray:
        """Environment actions from the outputs ``params`` and ``noise``, by training's formula."""
        if self.kind == "categorical":
            return np.argmax(params["logits"] + noise, -1).astype(np.int32)
        if self.kind == "multi_categorical":
            z = params["logits"] + noise
            return np.stack([np.argmax(z[:, a:b], -1) for a, b in zip(self.starts[:-1], self.starts[1:])],
                            -1).astype(np.int32)
        if self.kind == "bernoulli":
            return (params["logits"] + noise > 0).astype(np.int32)
        mean = params["mean"]
        if self.kind == "state_dependent_gaussian":
            u = mean + np.matmul(params["latent"][:, None, :], self.sde_scale * noise)[:, 0, :]
        else:
            u = mean + params["std"] * noise
        if self.kind == "squashed_gaussian":
            a = (2.0 / (1.0 + np.exp(-2.0 * u.astype(np.float64))) - 1.0).astype(np.float32)  # tanh(u)
            u = self.low + (a + np.float32(1.0)) * ((self.high - self.low) / np.float32(2.0))
        return np.clip(u, self.low, self.high).astype(np.float32)

    def kl(self, p: Dict[str, np.ndarray], q: Dict[str, np.ndarray]) -> np.ndarray:
        """KL(p || q) per row (float64, nats): p the training cell's outputs, q a backend's. A squashed
        Gaussian's is its pre-squash Gaussians' (tanh and the Box map are one-to-one)."""
        if self.kind == "categorical":
            return _categorical_kl(p["logits"], q["logits"])
        if self.kind == "multi_categorical":
            return np.sum([_categorical_kl(p["logits"][:, a:b], q["logits"][:, a:b])
                           for a, b in zip(self.starts[:-1], self.starts[1:])], axis=0)
        if self.kind == "bernoulli":
            lp, lq = (np.asarray(x["logits"], np.float64) for x in (p, q))
            pp = 1.0 / (1.0 + np.exp(-lp))
            # p log(p/q) + (1-p) log((1-p)/(1-q)) with log sigmoid(l) = -softplus(-l)
            return (pp * (np.logaddexp(0, -lq) - np.logaddexp(0, -lp))
                    + (1 - pp) * (np.logaddexp(0, lq) - np.logaddexp(0, lp))).sum(-1)
        mp, sp, mq, sq = (np.asarray(a, np.float64) for a in (p["mean"], p["std"], q["mean"], q["std"]))
        return (np.log(sq / sp) + (sp * sp + (mp - mq) ** 2) / (2.0 * sq * sq) - 0.5).sum(-1)

    def check(self, outputs: Dict[str, np.ndarray], n: int, where: str) -> None:
        """Raise ExportError unless ``outputs`` are this kind's, ``n`` rows each, finite (stds > 0)."""
        for name in self.outputs:
            x = outputs.get(name)
            if not isinstance(x, np.ndarray) or x.ndim != 2 or x.shape[0] != n:
                raise ExportError(f"{where}: distribution output '{name}' is "
                                  f"{None if x is None else list(np.shape(x))}, expected {n} rows")
            if not np.isfinite(x).all() or (name == "std" and (x <= 0).any()):
                raise ExportError(f"{where}: distribution output '{name}' holds non-finite"
                                  f"{' or non-positive' if name == 'std' else ''} values")


def _categorical_kl(lp: np.ndarray, lq: np.ndarray) -> np.ndarray:
    lp, lq = np.asarray(lp, np.float64), np.asarray(lq, np.float64)
    logp = lp - np.logaddexp.reduce(lp, axis=-1, keepdims=True)
    logq = lq - np.logaddexp.reduce(lq, axis=-1, keepdims=True)
    return (np.exp(logp) * (logp - logq)).sum(-1)


def kl_report(dist: Distribution, p: Dict[str, np.ndarray], q: Dict[str, np.ndarray]) -> dict:
    """The per-row KL summary of a check: max, mean, the rows above the tolerance."""
    kl = dist.kl(p, q)
    above = np.flatnonzero(~(kl <= dist.tolerance))
    return {"kind": dist.kind, "kl_max": float(kl.max()) if kl.size else 0.0, "kl_mean": float(kl.mean()) if kl.size else 0.0,
            "tolerance": dist.tolerance, "rows_above": int(above.size), "first_above": int(above[0]) if above.size else None,
            "passed": bool(above.size == 0)}


def read_distribution_io(f: _Fields, spec, batch: Optional[int]) -> Optional[Distribution]:
    """The Distribution of an export's ``io.distribution`` section (None: the graph outputs the action
    only), checked to be exactly :func:`distribution_io` of its kind, the action space and batch."""
    io = f.get("io", "dict")
    if "distribution" not in io:
        return None
    kind = f.get("io.distribution.kind", "str")
    if kind not in OUTPUTS or kind not in kinds_of(spec):
        raise ExportError(f"{MANIFEST}: field 'io.distribution.kind' is {_short(kind)}, which does not fit the "
                          f"{spec.act_kind} action space (kinds: {', '.join(OUTPUTS)})")
    scale = None
    if kind == "state_dependent_gaussian":
        raw = f.get("io.distribution.sde_scale", "list")
        try:
            scale = np.asarray(raw, np.float64)
        except (TypeError, ValueError):
            scale = None
        if scale is None or scale.ndim != 2 or scale.shape[1] != spec.n_actions or not (1 <= scale.shape[0] <= 4096) \
                or not np.isfinite(scale).all() or (scale <= 0).any():
            raise ExportError(f"{MANIFEST}: field 'io.distribution.sde_scale' is {_short(raw)}, expected a "
                              f"(latent, {spec.n_actions}) matrix of positive numbers")
    want = distribution_io(kind, spec, batch, scale)
    got = f.get("io.distribution", "dict")
    for key in ("outputs", "kl_tolerance"):
        if got.get(key) != want[key]:
            raise ExportError(f"{MANIFEST}: field 'io.distribution.{key}' is {_short(got.get(key))}, expected "
                              f"{_short(want[key])} (a {kind} distribution of the {spec.act_kind} action space)")
    return Distribution(kind, spec, scale)


def split_outputs(dist: Distribution, outs: Sequence[np.ndarray]) -> Dict[str, np.ndarray]:
    """A graph's outputs after the action (and a recurrent graph's state) by name."""
    if len(outs) != len(dist.outputs):
        raise ExportError(f"the model returns {len(outs)} distribution outputs, the manifest names "
                          f"{len(dist.outputs)} ({', '.join(dist.outputs)})")
    return {name: np.asarray(o) for name, o in zip(dist.outputs, outs)}
