"""PPO's Categorical loss head with its backward written out gives autodiff's gradients bit for bit
on minibatches of 2^k rows (clipped and unclipped ratios, ties at ratio 1, any vf_coef), and
PPOLoss uses it only for those."""
import numpy as np
import pytest
from mindspore import Tensor, nn, ops

from msrl_consistent import registry
from msrl_consistent.algorithms.ppo import PPOLoss
from msrl_consistent.config import load_config


class Grads(nn.Cell):
    def __init__(self, loss, params):
        super().__init__()
        self.fn = ops.value_and_grad(loss, None, params, has_aux=True)

    def construct(self, *data):
        (loss, pg, vl, ent, kl, cf), grads = self.fn(*data)
        return ops.stack([loss, pg, vl, ent, kl, cf]), grads


def _data(algo, n, seed):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    actions = rng.integers(0, 2, n).astype(np.int32)
    logits = algo.agent.actor(Tensor(obs)).asnumpy()
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    old = logp[np.arange(n), actions].astype(np.float32)
    # a third unchanged (ratio exactly 1: the minimum's tie), the rest moved in and past the clip range
    old[n // 3:] += rng.normal(scale=0.3, size=n - n // 3).astype(np.float32)
    adv = rng.normal(size=n).astype(np.float32)
    ret = rng.normal(size=n).astype(np.float32)
    vals = rng.normal(size=n).astype(np.float32)
    return [Tensor(x) for x in (obs, actions, old, adv, ret, vals)] + [Tensor(np.float32(0.2)), Tensor(np.float32(0.0))]


@pytest.mark.parametrize("n, vf_coef, lean", [(256, 0.5, True), (64, 0.37, True), (1, 0.5, True), (100, 0.5, False)])
def test_written_backward_equals_autodiff_bitwise(n, vf_coef, lean):
    cfg = load_config("ppo/CartPole-v1", [f"algo.vf_coef={vf_coef}", "log.tensorboard=false"])
    algo = registry.get("ppo")(cfg)
    params = algo.agent.trainable_params()
    written = PPOLoss(algo.agent, cfg.algo)
    autodiff = PPOLoss(algo.agent, cfg.algo)
    autodiff.lean = False
    assert written.lean
    data = _data(algo, n, seed=n)
    stats_w, grads_w = Grads(written, params)(*data)
    stats_a, grads_a = Grads(autodiff, params)(*data)
    assert np.array_equal(stats_w.asnumpy(), stats_a.asnumpy())
    for p, gw, ga in zip(params, grads_w, grads_a):
        assert np.array_equal(gw.asnumpy(), ga.asnumpy()), (p.name, np.max(np.abs(gw.asnumpy() - ga.asnumpy())))
    assert any(np.any(g.asnumpy() != 0) for g in grads_w)


def test_head_not_used_with_entropy_bonus_or_value_clipping_or_continuous_actions():
    for name, sets in (("ppo/CartPole-v1", ["algo.ent_coef=0.01"]), ("ppo/CartPole-v1", ["algo.clip_range_vf=0.2"]),
                       ("ppo/Pendulum-v1", [])):
        cfg = load_config(name, sets + ["log.tensorboard=false"])
        assert not PPOLoss(registry.get("ppo")(cfg).agent, cfg.algo).lean, (name, sets)


@pytest.mark.parametrize("n", [64, 1])
def test_population_head_equals_its_autodiff_bitwise(n):
    """The one PPOLoss on a population's MembersAgent (members on a leading axis, one vf_coef
    each) with the head against the same loss through autodiff."""
    from msrl_consistent.algorithms.ppo.members import MembersAgent
    from msrl_consistent.algorithms.ppo.update import MembersTotal

    cfg = load_config("ppo/CartPole-v1", ["log.tensorboard=false"])
    algos = [registry.get("ppo")(load_config("ppo/CartPole-v1", [f"seed={s}", "log.tensorboard=false"]))
             for s in range(3)]
    stacked = MembersAgent([a.agent for a in algos])
    coefs = {"ent_coef": np.zeros(3), "vf_coef": np.array([0.5, 0.37, 1.0])}
    written = PPOLoss(stacked, cfg.algo, coefs)
    autodiff = PPOLoss(stacked, cfg.algo, coefs)
    autodiff.lean = False
    assert written.lean
    per = [_data(a, n, seed=10 + k) for k, a in enumerate(algos)]
    stack = lambda i: Tensor(np.stack([p[i].asnumpy() for p in per]))  # noqa: E731
    args = [stack(i) for i in range(6)] + [Tensor(np.full((3, 1), 0.2, np.float32)), Tensor(np.zeros((3, 1), np.float32))]
    params = stacked.trainable_params()
    stats_w, grads_w = GradsTotal(MembersTotal(written), params)(*args)
    stats_a, grads_a = GradsTotal(MembersTotal(autodiff), params)(*args)
    assert stats_w.shape == (8, 3)  # ClippedObjective's eight outputs, one per member
    assert np.array_equal(stats_w.asnumpy(), stats_a.asnumpy())
    for p, gw, ga in zip(params, grads_w, grads_a):
        assert np.array_equal(gw.asnumpy(), ga.asnumpy()), (p.name, np.max(np.abs(gw.asnumpy() - ga.asnumpy())))
    assert all(np.any(g.asnumpy()[k] != 0) for g in grads_w[:1] for k in range(3))


class GradsTotal(nn.Cell):
    def __init__(self, loss, params):
        super().__init__()
        self.fn = ops.value_and_grad(loss, None, params, has_aux=True)

    def construct(self, *data):
        out, grads = self.fn(*data)
        return ops.stack(out[1:]), grads
