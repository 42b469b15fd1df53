"""The deploying side's action distributions (msrl_consistent.deploy.sampling): the KL formulas
against their definitions, sampling's statistics, and the manifest section's validation."""
import numpy as np
import pytest

from msrl_consistent.deploy import ExportError
from msrl_consistent.deploy.fields import _Fields
from msrl_consistent.deploy.sampling import Distribution, distribution_io, kl_report, read_distribution_io
from msrl_consistent.deploy.spaces import SpaceSpec

BOX = SpaceSpec((3,), np.full(3, -1.0, np.float32), np.ones(3, np.float32), False, 2,
                act_low=np.full(2, -2.0, np.float32), act_high=np.full(2, 2.0, np.float32))
DISCRETE = SpaceSpec((3,), np.full(3, -1.0, np.float32), np.ones(3, np.float32), True, 4)
MULTI = SpaceSpec((3,), np.full(3, -1.0, np.float32), np.ones(3, np.float32), True, 2, act_kind="MultiDiscrete",
                  nvec=(3, 2))
BINARY = SpaceSpec((3,), np.full(3, -1.0, np.float32), np.ones(3, np.float32), True, 2, act_kind="MultiBinary",
                   nvec=(2, 2))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_kl_formulas_are_the_definitions():
    rng = np.random.default_rng(0)
    lp, lq = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    p, q = _softmax(lp), _softmax(lq)
    d = Distribution("categorical", DISCRETE)
    np.testing.assert_allclose(d.kl({"logits": lp}, {"logits": lq}), (p * np.log(p / q)).sum(-1), rtol=1e-12)
    assert (d.kl({"logits": lp}, {"logits": lp}) == 0).all()
    # MultiCategorical: the sum over the segments; Bernoulli: a 2-way categorical per dimension
    m = Distribution("multi_categorical", MULTI)
    lp5, lq5 = rng.normal(size=(5, 5)), rng.normal(size=(5, 5))
    want = sum((_softmax(lp5[:, a:b]) * np.log(_softmax(lp5[:, a:b]) / _softmax(lq5[:, a:b]))).sum(-1)
               for a, b in ((0, 3), (3, 5)))
    np.testing.assert_allclose(m.kl({"logits": lp5}, {"logits": lq5}), want, rtol=1e-12)
    b = Distribution("bernoulli", BINARY)
    two = lambda x: np.stack([np.zeros_like(x), x], -1)  # noqa: E731  (sigmoid(l) = softmax([0, l])[1])
    want = sum(d.kl({"logits": two(lp[:, i])}, {"logits": two(lq[:, i])}) for i in range(2))
    np.testing.assert_allclose(b.kl({"logits": lp[:, :2]}, {"logits": lq[:, :2]}), want, rtol=1e-10)
    # Gaussians: log(sq/sp) + (sp^2 + (mp - mq)^2) / (2 sq^2) - 1/2 per dimension
    g = Distribution("gaussian", BOX)
    p = {"mean": np.array([[0.0, 1.0]]), "std": np.array([[1.0, 2.0]])}
    q = {"mean": np.array([[1.0, 1.0]]), "std": np.array([[1.0, 1.0]])}
    np.testing.assert_allclose(g.kl(p, q), [0.5 + (np.log(0.5) + 2.0 - 0.5)], rtol=1e-12)


def test_samples_follow_the_distribution():
    rng = np.random.default_rng(1)
    d = Distribution("categorical", DISCRETE)
    logits = np.tile(np.log(np.array([0.1, 0.2, 0.3, 0.4], np.float32)), (20000, 1))
    counts = np.bincount(d.sample({"logits": logits}, d.noise(rng, 20000)), minlength=4) / 20000
    np.testing.assert_allclose(counts, [0.1, 0.2, 0.3, 0.4], atol=0.015)
    b = Distribution("bernoulli", BINARY)
    x = b.sample({"logits": np.tile(np.float32([0.0, 2.0]), (20000, 1))}, b.noise(rng, 20000))
    np.testing.assert_allclose(x.mean(0), [0.5, 1 / (1 + np.exp(-2.0))], atol=0.015)
    g = Distribution("gaussian", BOX)
    a = g.sample({"mean": np.zeros((20000, 2), np.float32), "std": np.full((20000, 2), 0.5, np.float32)},
                 g.noise(rng, 20000))
    assert a.dtype == np.float32 and abs(a.std() - 0.5) < 0.01 and a.min() >= -2 and a.max() <= 2
    s = Distribution("squashed_gaussian", BOX)
    a = s.sample({"mean": np.full((1000, 2), 50.0, np.float32), "std": np.ones((1000, 2), np.float32)},
                 s.noise(rng, 1000))
    assert (a == 2.0).all()  # tanh saturates: the Box's upper bound, never beyond


def test_a_report_names_the_rows_above_the_tolerance():
    d = Distribution("categorical", DISCRETE)
    p = {"logits": np.zeros((4, 4))}
    q = {"logits": np.array([[0, 0, 0, 0], [0, 0, 0, 1e-4], [0, 0, 0, 1.0], [0, 0, 0, 0]], float)}
    r = kl_report(d, p, q)
    assert r["rows_above"] == 1 and r["first_above"] == 2 and not r["passed"] and r["kl_max"] > 0.05
    assert 0 < d.kl(p, q)[1] < 1e-6  # a 1e-4 logit difference is far below the tolerance


@pytest.mark.parametrize("edit,words", [
    (lambda io: io.update(kind="categorical"), "does not fit the Box action space"),
    (lambda io: io.update(kind="poisson"), "io.distribution.kind"),
    (lambda io: io["outputs"].reverse(), "io.distribution.outputs"),
    (lambda io: io.update(sde_scale=[[1.0, -1.0]] * 4), "positive numbers"),
    (lambda io: io.update(sde_scale=[[1.0]] * 4), r"\(latent, 2\) matrix"),
    (lambda io: io.update(sde_scale="big"), "expected list"),
])
def test_the_manifest_section_is_validated(edit, words):
    io = distribution_io("state_dependent_gaussian", BOX, None, np.ones((4, 2), np.float32))
    assert read_distribution_io(_Fields({"io": {"distribution": io}}), BOX, None).sde_scale.shape == (4, 2)
    edit(io)
    with pytest.raises(ExportError, match=words):
        read_distribution_io(_Fields({"io": {"distribution": io}}), BOX, None)


def test_an_export_without_the_section_has_no_distribution():
    assert read_distribution_io(_Fields({"io": {}}), BOX, 1) is None
