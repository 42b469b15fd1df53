"""SAC / TD3 building blocks against NumPy references: tanh-Gaussian log-prob, Polyak update,
TD3 target smoothing, replay buffer (wraparound, truncation, lean == normal), Box scaling."""
import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
from mindspore import Tensor, nn

from msrl_consistent import registry
from msrl_consistent.algorithms.cells import TargetPolicySmoothing
from msrl_consistent.algorithms.off_policy import ContinuousActions
from msrl_consistent.algorithms.sac import SACAct, SACAgent
from msrl_consistent.algorithms.td3 import TD3Act, TD3Agent
from msrl_consistent.buffers import ReplayBuffer
from msrl_consistent.config import ConfigError, load_config
from msrl_consistent.deploy.spaces import SpaceSpec
from msrl_consistent.determinism import configure_mindspore
from msrl_consistent.distributions import tanh_gaussian_log_prob
from msrl_consistent.networks.heads import TanhScaleHead

configure_mindspore("CPU")
CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs")
SMALL = ["policy.net_arch=[16, 16]", "algo.batch_size=8", "log.tensorboard=false"]


class _LogProb(nn.Cell):
    def construct(self, mean, log_std, u):
        return tanh_gaussian_log_prob(mean, log_std, u)


def test_tanh_gaussian_log_prob_matches_numpy():
    rng = np.random.default_rng(0)
    mean = rng.normal(0, 2, (64, 3))
    log_std = rng.uniform(-3, 1, (64, 3))
    u = mean + np.exp(log_std) * rng.normal(size=(64, 3))
    u[0] = [9.0, -12.0, 15.0]  # far in the tails: 1 - tanh(u)^2 underflows in float32, not in this form
    got = _LogProb()(*(Tensor(x.astype(np.float32)) for x in (mean, log_std, u))).asnumpy()
    std = np.exp(log_std)
    gauss = -0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    log_det = np.log(1.0 / np.cosh(u) ** 2)  # log(1 - tanh(u)^2), float64
    want = (gauss - log_det).sum(-1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def _filled(name, extra=()):
    cfg = load_config(os.path.join(CONFIGS, name, "Pendulum-v1.yaml"), SMALL + list(extra))
    algo = registry.get(name)(cfg)
    buf = algo.make_buffer(1)
    rng = np.random.default_rng(1)
    for i in range(40):
        buf.add(rng.normal(size=(1, 3)), rng.normal(size=(1, 3)), rng.uniform(-1, 1, (1, 1)), rng.normal(size=1),
                [i % 13 == 12], [i % 20 == 19])
    return algo


def _params(cell):
    return [p.asnumpy().copy() for p in cell.get_parameters()]


def _check_polyak(before_t, after_t, after_o, tau):
    for t0, t1, o1 in zip(before_t, after_t, after_o):
        np.testing.assert_allclose(t1, (1 - tau) * t0 + tau * o1, rtol=1e-5, atol=1e-6)


def test_sac_polyak_update_matches_numpy():
    algo = _filled("sac", ["algo.tau=0.3"])
    ag = algo.agent
    t_before = _params(ag.q1_target) + _params(ag.q2_target)
    o_before = _params(ag.q1) + _params(ag.q2)
    alpha_before = ag.log_alpha.asnumpy().copy()
    algo.train(1)
    o_after = _params(ag.q1) + _params(ag.q2)
    assert any(not np.array_equal(a, b) for a, b in zip(o_before, o_after))  # the critics moved
    _check_polyak(t_before, _params(ag.q1_target) + _params(ag.q2_target), o_after, 0.3)
    assert not np.array_equal(alpha_before, ag.log_alpha.asnumpy())  # the temperature moved


def test_td3_policy_delay_and_polyak():
    algo = _filled("td3", ["algo.tau=0.3", "algo.policy_delay=2"])
    ag = algo.agent
    targets = lambda: _params(ag.q1_target) + _params(ag.q2_target) + _params(ag.actor_target)  # noqa: E731
    t0, actor0 = targets(), _params(ag.actor)
    algo.train(1)  # update 1: critic only
    assert all(np.array_equal(a, b) for a, b in zip(t0, targets()))
    assert all(np.array_equal(a, b) for a, b in zip(actor0, _params(ag.actor)))
    algo.train(1)  # update 2: critic, actor, targets
    online = _params(ag.q1) + _params(ag.q2) + _params(ag.actor)
    assert not all(np.array_equal(a, b) for a, b in zip(actor0, _params(ag.actor)))
    _check_polyak(t0, targets(), online, 0.3)


def test_td3_target_smoothing_noise_bounds():
    cell = TargetPolicySmoothing(0.2, 0.5)
    rng = np.random.default_rng(0)
    u = rng.normal(0, 3, (4096, 2)).astype(np.float32)
    u[:4] = [[50, -50], [-50, 50], [0, 0], [0.3, -0.3]]
    eps = rng.normal(0, 4, (4096, 2)).astype(np.float32)  # large: many clipped
    eps[:4] = [[100, -100], [-100, 100], [100, -100], [1.0, -1.0]]
    a = cell(Tensor(u), Tensor(eps)).asnumpy()
    want = np.clip(np.tanh(u) + np.clip(0.2 * eps, -0.5, 0.5), -1, 1)
    np.testing.assert_allclose(a, want, atol=2e-4)  # MindSpore's CPU tanh is within ~1e-4 of NumPy's
    assert a.min() >= -1.0 and a.max() <= 1.0
    tanh_u = cell(Tensor(u), Tensor(np.zeros_like(eps))).asnumpy()  # the graph's own tanh(u)
    inner = np.abs(tanh_u) < 0.4  # no action clipping there: the noise itself is visible
    noise = (a - tanh_u)[inner]
    assert np.abs(noise).max() <= 0.5 + 1e-6 and np.abs(noise).max() > 0.49
    np.testing.assert_allclose(noise, np.clip(0.2 * eps[inner], -0.5, 0.5), atol=1e-6)


# -- replay buffer ------------------------------------------------------------------------------
def _episode_stream(n_steps, n_envs, seed=0):
    """Vector-step transitions where obs rows are unique, with terminations and truncations."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n_envs, 2)).astype(np.float32)
    out = []
    for _t in range(n_steps):
        nxt = rng.normal(size=(n_envs, 2)).astype(np.float32)  # the true next obs (final where ended)
        term = rng.random(n_envs) < 0.15
        trunc = ~term & (rng.random(n_envs) < 0.15)
        reset = rng.normal(size=(n_envs, 2)).astype(np.float32)
        act = rng.uniform(-1, 1, (n_envs, 1)).astype(np.float32)
        rew = rng.normal(size=n_envs).astype(np.float32)
        out.append((obs.copy(), nxt.copy(), act, rew, term, trunc))
        obs = np.where((term | trunc)[:, None], reset, nxt)  # SAME_STEP autoreset
    return out


@pytest.mark.parametrize("lean", [False, True])
def test_replay_buffer_wraparound_and_truncation(lean):
    n_envs, cap = 2, 11  # rounded down to 10 slots = 5 vector steps
    buf = ReplayBuffer(cap, 2, 1, n_envs, memory_lean=lean)
    assert buf.capacity == 10
    stream = _episode_stream(8, n_envs)
    for tr in stream:
        buf.add(*tr)
    assert buf.full and buf.size == 10 and buf.pos == (8 * n_envs) % 10
    kept = {}
    for obs, nxt, act, rew, term, _trunc in stream[-5:]:
        for i in range(n_envs):
            kept[obs[i].tobytes()] = (nxt[i], act[i], rew[i], float(term[i]))
    s = buf.sample(500, np.random.default_rng(3))
    seen = set()
    for j in range(500):
        key = s["obs"][j].tobytes()
        assert key in kept, "sampled a transition that was overwritten"
        nxt, act, rew, term = kept[key]
        np.testing.assert_array_equal(s["next_obs"][j], nxt)
        np.testing.assert_array_equal(s["actions"][j], act)
        assert s["rewards"][j] == rew and s["terminated"][j] == term
        seen.add(key)
    assert len(seen) == 10  # every stored transition, the newest row included, can be sampled
    # a truncated transition is stored as not terminated, with its true final next obs
    truncs = [(o[i], n[i]) for o, n, a, r, te, tr in stream[-5:] for i in range(n_envs) if tr[i]]
    assert truncs
    for o, n in truncs:
        j = [k for k in range(500) if s["obs"][k].tobytes() == o.tobytes()]
        assert j and s["terminated"][j[0]] == 0.0
        np.testing.assert_array_equal(s["next_obs"][j[0]], n)


@pytest.mark.parametrize("n_steps", [3, 5, 13])
def test_replay_buffer_lean_equals_normal(n_steps):
    normal = ReplayBuffer(10, 2, 1, 2, memory_lean=False)
    lean = ReplayBuffer(10, 2, 1, 2, memory_lean=True)
    for tr in _episode_stream(n_steps, 2, seed=n_steps):
        normal.add(*tr)
        lean.add(*tr)
    a = normal.sample(64, np.random.default_rng(7))
    b = lean.sample(64, np.random.default_rng(7))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert lean.nbytes() < normal.nbytes()
    # state round trip, also across modes
    for src in (normal, lean):
        for dst_lean in (False, True):
            dst = ReplayBuffer(10, 2, 1, 2, memory_lean=dst_lean)
            dst.load({k: np.array(v) for k, v in src.state().items()})
            c = dst.sample(64, np.random.default_rng(7))
            for k in a:
                np.testing.assert_array_equal(a[k], c[k])


# -- Box scaling ---------------------------------------------------------------------------------
LOW, HIGH = np.array([-1.0, 0.0], np.float32), np.array([3.0, 5.0], np.float32)


def test_tanh_scale_head_asymmetric_bounds():
    head = TanhScaleHead(LOW, HIGH)
    u = np.array([[0, 0], [100, -100], [-100, 100], [0.5, -2.0]], np.float32)
    got = head(Tensor(u)).asnumpy()
    want = LOW + (np.tanh(u) + 1) / 2 * (HIGH - LOW)
    np.testing.assert_allclose(got, want, atol=2e-5)
    np.testing.assert_allclose(got[0], [1.0, 2.5])
    np.testing.assert_array_equal(got[1], [3.0, 0.0])
    np.testing.assert_array_equal(got[2], [-1.0, 5.0])


def _spec():
    return SpaceSpec((3,), np.full(3, -np.inf, np.float32), np.full(3, np.inf, np.float32), False, 2, LOW, HIGH)


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_policy_cells_scale_to_asymmetric_box(name):
    cfg = load_config(os.path.join(CONFIGS, name, "Pendulum-v1.yaml"), SMALL)
    agent = (SACAgent if name == "sac" else TD3Agent)(cfg, _spec(), np.random.default_rng(0))
    rng = np.random.default_rng(1)
    obs = rng.normal(0, 30, (32, 3)).astype(np.float32)  # large inputs: saturated actions too
    u = agent.actor(Tensor(obs)).asnumpy()
    det = agent.policy_cell()(Tensor(obs)).asnumpy()
    np.testing.assert_allclose(det, LOW + (np.tanh(u) + 1) / 2 * (HIGH - LOW), atol=2e-5)
    assert (det >= LOW).all() and (det <= HIGH).all()
    # the acting cell with zero noise takes the exported policy's action
    act = SACAct(agent) if name == "sac" else TD3Act(agent, 0.1)
    out = act(Tensor(obs), Tensor(np.zeros((32, 2), np.float32))).asnumpy()
    np.testing.assert_allclose(out[:, :2], det, atol=2e-6)
    np.testing.assert_allclose(LOW + (out[:, 2:] + 1) / 2 * (HIGH - LOW), out[:, :2], atol=1e-5)
    # with noise: still inside the Box, and the normalized action maps to the env action
    out = act(Tensor(obs), Tensor(rng.normal(0, 3, (32, 2)).astype(np.float32))).asnumpy()
    env_a, norm = out[:, :2], out[:, 2:]
    assert (env_a >= LOW).all() and (env_a <= HIGH).all() and np.abs(norm).max() <= 1.0
    np.testing.assert_allclose(env_a, LOW + (norm + 1) / 2 * (HIGH - LOW), atol=1e-5)


def test_random_warmup_actions_in_box():
    fake = SimpleNamespace(spec=_spec(), rng=np.random.default_rng(0))
    env_a, norm = ContinuousActions.random_actions(fake, 4096)
    assert (env_a >= LOW).all() and (env_a <= HIGH).all()
    assert np.abs(norm).max() <= 1.0 and norm.min() < -0.99 and norm.max() > 0.99
    np.testing.assert_allclose(env_a, LOW + (norm + 1) / 2 * (HIGH - LOW), atol=1e-5)


# -- configuration --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["sac", "td3"])
def test_discrete_action_space_is_config_error(name):
    cfg = load_config(os.path.join(CONFIGS, name, "Pendulum-v1.yaml"), ["env.id=CartPole-v1"])
    with pytest.raises(ConfigError, match=r"Discrete\(2\)"):
        registry.get(name)(cfg)


@pytest.mark.parametrize("path", ["sac/Pendulum-v1.yaml", "td3/Pendulum-v1.yaml",
                                  "sac/HalfCheetah-v5.yaml", "td3/HalfCheetah-v5.yaml"])
def test_configs_load(path):
    cfg = load_config(os.path.join(CONFIGS, path))
    assert cfg.algorithm == path.split("/")[0]
    with pytest.raises(ConfigError, match="algo.tau"):
        load_config(os.path.join(CONFIGS, path), ["algo.tau=0"])
    with pytest.raises(ConfigError, match="algo.gradient_steps"):
        load_config(os.path.join(CONFIGS, path), ["algo.gradient_steps=0"])


@pytest.mark.parametrize("saved_lean", [True, False])
def test_lean_buffer_resume_keeps_the_newest_rows_next_obs(saved_lean):
    # a 5-step stream obs t -> next t + 1; the run is checkpointed and resumed, its env reseeded:
    # the first row after the resume holds the reset observation -99, not the successor of step 4
    src = ReplayBuffer(100, 1, 1, n_envs=1, memory_lean=saved_lean)
    for t in range(5):
        src.add(np.array([[t]]), np.array([[t + 1]]), np.zeros((1, 1)), np.zeros(1), [False], [False])
    for lean in (True, False):
        buf = ReplayBuffer(100, 1, 1, n_envs=1, memory_lean=lean)
        buf.load(src.state())
        buf.add(np.array([[-99.0]]), np.array([[-98.0]]), np.zeros((1, 1)), np.zeros(1), [False], [False])
        b = buf.sample(64, np.random.default_rng(0))
        pairs = {(float(o), float(n)) for o, n in zip(b["obs"][:, 0], b["next_obs"][:, 0])}
        assert (4.0, 5.0) in pairs and (4.0, -99.0) not in pairs
        assert pairs <= {(t, t + 1.0) for t in range(5)} | {(-99.0, -98.0)}
