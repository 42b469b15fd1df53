"""Observation and action spaces beyond Box/Discrete: the space checks, the encoders inside the
policy cell and the input validation of deploy.Policy (no training here: tests/integration/test_spaces_train.py)."""
import numpy as np
import pytest
from gymnasium import spaces
from mindspore import Tensor

from msrl_consistent.config import ConfigError, load_config
from msrl_consistent.deploy import Policy
from msrl_consistent.deploy.spaces import SpaceSpec
from msrl_consistent.envs import space_spec
from msrl_consistent.networks.agents import require_box
from msrl_consistent.networks.encoders import OneHot


def test_discrete_observation_spec_round_trips():
    spec = space_spec(spaces.Discrete(16), spaces.Discrete(4), "FrozenLake-v1")
    assert (spec.obs_kind, spec.obs_n, spec.obs_shape, spec.obs_dim) == ("Discrete", 16, (1,), 1)
    j = spec.to_json()
    assert j["observation"]["type"] == "Discrete" and j["observation"]["n"] == 16
    back = SpaceSpec.from_json(j)
    assert (back.obs_kind, back.obs_n, back.obs_dim, back.act_kind, back.n_actions) == ("Discrete", 16, 1, "Discrete", 4)
    # golden-set observations of a Discrete space are indices
    obs = spec.sample_obs(np.random.default_rng(0), spec.obs_low, spec.obs_high, 500)
    assert obs.shape == (500, 1) and obs.dtype == np.float32
    assert set(np.unique(obs)) == set(range(16))


def test_discrete_observation_with_start_refused():
    with pytest.raises(ConfigError, match="Discrete observation space with start=3"):
        space_spec(spaces.Discrete(5, start=3), spaces.Discrete(2), "X-v0")


def test_onehot_cell_is_exact():
    idx = np.array([[0], [3], [15], [7]], np.float32)
    out = OneHot(16)(Tensor(idx)).asnumpy()
    assert out.dtype == np.float32 and np.array_equal(out, np.eye(16, dtype=np.float32)[idx[:, 0].astype(int)])


def test_normalize_obs_refused_for_discrete_observations(configs_dir):
    import os

    from msrl_consistent.registry import build_agent
    cfg = load_config(os.path.join(configs_dir, "ppo", "FrozenLake-v1.yaml"), ["env.normalize_obs=true"])
    spec = space_spec(spaces.Discrete(16), spaces.Discrete(4))
    with pytest.raises(ConfigError, match="env.normalize_obs.*Discrete"):
        build_agent(cfg, spec, np.random.default_rng(0))


def test_offpolicy_needs_box_observations():
    spec = space_spec(spaces.Discrete(16), spaces.Box(-1, 1, (2,)))
    with pytest.raises(ConfigError, match="sac needs Box observations.*Discrete"):
        require_box(spec, "sac")


class _Echo(Policy):
    """A deploy.Policy whose 'model' returns the observation index as the action."""

    def _run(self, x):
        return x[:, 0].astype(np.int32)


def test_discrete_observation_validation_names_the_space():
    p = _Echo(space_spec(spaces.Discrete(16), spaces.Discrete(16)), None)
    assert p.act(5) == 5 and np.ndim(p.act(5)) == 0
    assert p.act(np.int64(15)) == 15
    assert p.act(np.array([0, 3, 7])).tolist() == [0, 3, 7]
    assert p.act(np.array([[2], [4]], np.float32)).tolist() == [2, 4]
    for bad, what in ((16, "got 16"), (-1, "got -1"), (2.5, "got 2.5"), (np.nan, "got nan"),
                      (np.zeros((2, 2)), "shape"), ("a", "dtype")):
        with pytest.raises(ValueError, match=r"Discrete\(16\) observations.*" + what):
            p.act(bad)


# -- MultiDiscrete / MultiBinary actions ------------------------------------------------------------
def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_multidiscrete_and_multibinary_specs_round_trip():
    md = space_spec(spaces.Box(-1, 1, (3,)), spaces.MultiDiscrete([3, 4, 2]), "X-v0")
    assert (md.act_kind, md.n_actions, md.nvec, md.action_shape, md.logits_dim, md.discrete) == \
        ("MultiDiscrete", 3, (3, 4, 2), (3,), 9, True)
    mb = space_spec(spaces.Box(-1, 1, (3,)), spaces.MultiBinary(5), "X-v0")
    assert (mb.act_kind, mb.n_actions, mb.action_shape, mb.logits_dim) == ("MultiBinary", 5, (5,), 5)
    for spec in (md, mb):
        back = SpaceSpec.from_json(spec.to_json())
        assert (back.act_kind, back.n_actions, back.nvec, back.logits_dim) == \
            (spec.act_kind, spec.n_actions, spec.nvec, spec.logits_dim)


def test_multicategorical_matches_numpy():
    from msrl_consistent.distributions import MultiCategorical
    nvec = (3, 4, 2)
    d = MultiCategorical(nvec)
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (64, 9)).astype(np.float32)
    actions = np.stack([rng.integers(0, n, 64) for n in nvec], -1).astype(np.int32)
    segs = np.split(logits.astype(np.float64), np.cumsum(nvec)[:-1], axis=1)
    probs = [_softmax(s) for s in segs]
    want_lp = sum(np.log(p[np.arange(64), actions[:, i]]) for i, p in enumerate(probs))
    want_h = sum(-(p * np.log(p)).sum(-1) for p in probs)
    lp = d.log_prob(Tensor(logits), Tensor(actions)).asnumpy()
    h = d.entropy(Tensor(logits)).asnumpy()
    assert np.allclose(lp, want_lp, atol=1e-5) and np.allclose(h, want_h, atol=1e-5)
    mode = d.mode(Tensor(logits)).asnumpy()
    assert mode.dtype == np.int32 and np.array_equal(mode, np.stack([s.argmax(-1) for s in segs], -1))
    # Gumbel-max with the host noise: per-dimension frequencies follow the softmax
    one = np.tile(logits[:1], (20000, 1))
    samples = d.draw(Tensor(one), Tensor(d.noise(rng, 20000))).asnumpy()
    for i, n in enumerate(nvec):
        freq = np.bincount(samples[:, i], minlength=n) / len(samples)
        assert np.abs(freq - probs[i][0]).max() < 0.015, (i, freq, probs[i][0])


def test_bernoulli_matches_numpy():
    from msrl_consistent.distributions import Bernoulli
    d = Bernoulli(4)
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 2, (64, 4)).astype(np.float32)
    actions = rng.integers(0, 2, (64, 4)).astype(np.int32)
    p = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    want_lp = np.log(np.where(actions == 1, p, 1 - p)).sum(-1)
    want_h = -(p * np.log(p) + (1 - p) * np.log(1 - p)).sum(-1)
    assert np.allclose(d.log_prob(Tensor(logits), Tensor(actions)).asnumpy(), want_lp, atol=1e-5)
    assert np.allclose(d.entropy(Tensor(logits)).asnumpy(), want_h, atol=1e-5)
    assert np.array_equal(d.mode(Tensor(logits)).asnumpy(), (logits > 0).astype(np.int32))
    one = np.tile(logits[:1], (20000, 1))
    samples = d.draw(Tensor(one), Tensor(d.noise(rng, 20000))).asnumpy()
    assert samples.dtype == np.int32 and np.abs(samples.mean(0) - p[0]).max() < 0.015


def test_multi_action_checks_of_deploy_policy():
    p = _Echo(space_spec(spaces.Box(-1, 1, (3,)), spaces.MultiDiscrete([3, 4, 2])), None)
    ok = np.array([[2, 3, 1], [0, 0, 0]], np.int32)
    assert p.action_violation(ok, 2) is None
    assert p.action_violation(np.array([[3, 0, 0]], np.int32), 1) == "out_of_range"
    assert p.action_violation(np.array([[0, 4, 0]], np.int32), 1) == "out_of_range"
    assert p.action_violation(np.array([0, 1], np.int32), 2) == "shape"
    assert p.action_violation(ok.astype(np.float32), 2) == "shape"


# -- Dict observations ------------------------------------------------------------------------------
DICT_SPACE = spaces.Dict({"sign": spaces.Box(-1.0, 1.0, (1,), np.float32), "goal": spaces.Discrete(3),
                          "pos": spaces.Box(-1.0, 1.0, (2, 3), np.float32)})


def test_dict_spec_sorted_keys_round_trip_and_golden_sampling():
    spec = space_spec(DICT_SPACE, spaces.Discrete(6), "X-v0")
    assert spec.obs_kind == "Dict" and spec.obs_dim == 8
    assert [p[0] for p in spec.obs_parts] == ["goal", "pos", "sign"]
    assert spec.column_n.tolist() == [3, 0, 0, 0, 0, 0, 0, 0]
    j = spec.to_json()["observation"]
    assert j["keys"] == ["goal", "pos", "sign"] and j["spaces"]["pos"] == {"type": "Box", "shape": [2, 3]}
    assert SpaceSpec.from_json(spec.to_json()).obs_parts == spec.obs_parts
    obs = spec.sample_obs(np.random.default_rng(0), spec.obs_low, spec.obs_high, 300)
    assert set(np.unique(obs[:, 0])) == {0.0, 1.0, 2.0}
    assert obs[:, 1:].min() >= -1 and obs[:, 1:].max() <= 1 and len(np.unique(obs[:, 1])) > 100


def test_dict_spaces_refused_with_the_key_named():
    with pytest.raises(ConfigError, match="key 'inner' is a Dict; nested Dicts are not supported"):
        space_spec(spaces.Dict({"inner": spaces.Dict({"a": spaces.Discrete(2)})}), spaces.Discrete(2), "X-v0")
    with pytest.raises(ConfigError, match="key 'front cam' holds an image, and an image key names its graph input"):
        space_spec(spaces.Dict({"front cam": spaces.Box(0, 255, (4, 4), np.uint8)}), spaces.Discrete(2), "X-v0")
    with pytest.raises(ConfigError, match=r"key 'img': unsupported uint8 observation shape \(4,\)"):
        space_spec(spaces.Dict({"img": spaces.Box(0, 255, (4,), np.uint8)}), spaces.Discrete(2), "X-v0")


def test_dict_encoder_is_onehot_and_identity_in_key_order():
    from msrl_consistent.envs import flat_obs
    from msrl_consistent.networks.encoders import obs_encoder
    spec = space_spec(DICT_SPACE, spaces.Discrete(6))
    enc, width = obs_encoder(spec)
    assert width == 3 + 6 + 1
    rng = np.random.default_rng(0)
    batch = {"goal": np.array([2, 0, 1]), "pos": rng.normal(size=(3, 2, 3)).astype(np.float32),
             "sign": np.array([[1.0], [-1.0], [0.5]], np.float32)}
    row = flat_obs(batch, 3)
    out = enc(Tensor(row)).asnumpy()
    want = np.concatenate([np.eye(3, dtype=np.float32)[batch["goal"]], batch["pos"].reshape(3, 6), batch["sign"]], 1)
    assert np.array_equal(out, want)


def test_dict_act_validation_names_the_space():
    p = _Echo(space_spec(DICT_SPACE, spaces.Discrete(6)), None)  # echoes column 0, the 'goal' index
    one = {"goal": 2, "sign": np.array([1.0], np.float32), "pos": np.zeros((2, 3), np.float32)}
    assert p.act(one) == 2 and np.ndim(p.act(one)) == 0
    many = {"goal": np.array([0, 1]), "sign": np.ones((2, 1), np.float32), "pos": np.zeros((2, 6), np.float32)}
    assert p.act(many).tolist() == [0, 1]
    space = r"Dict\(goal: Discrete\(3\), pos: Box\(2, 3\), sign: Box\(1,\)\)"
    cases = [(dict(one, goal=3), "key 'goal' of " + space + ": expected a Discrete.3. index 0..2, got 3"),
             ({"goal": 1}, space + r": missing keys \['pos', 'sign'\]"),
             (dict(one, extra=1), r"unexpected keys \['extra'\]"),
             (dict(one, pos=np.zeros(5)), r"key 'pos' of .*expected shape \(2, 3\)"),
             (dict(one, sign=np.ones((2, 1))), "every key needs the same batch"),
             (dict(one, pos=np.array([["a"] * 3] * 2)), "expected numbers"),
             (np.zeros(5, np.float32), space + r" or its packed"),
             (np.full(8, 0.5, np.float32), "column 0 of the packed row holds a Discrete index")]
    for bad, what in cases:
        with pytest.raises(ValueError, match=what):
            p.act(bad)


# -- image observations and frame stacking ------------------------------------------------------------
def test_image_spaces_detected_with_layout():
    hwc = space_spec(spaces.Box(0, 255, (32, 24, 3), np.uint8), spaces.Discrete(4), "X-v0")
    chw = space_spec(spaces.Box(0, 255, (3, 32, 24), np.uint8), spaces.Discrete(4), "X-v0")
    gray = space_spec(spaces.Box(0, 255, (32, 24), np.uint8), spaces.Discrete(4), "X-v0")
    assert (hwc.obs_kind, hwc.image_layout, hwc.image_hwc, hwc.input_dtype) == ("Image", "HWC", (32, 24, 3), "uint8")
    assert (chw.image_layout, chw.image_hwc, gray.image_hwc) == ("CHW", (32, 24, 3), (32, 24, 1))
    back = SpaceSpec.from_json(hwc.to_json())
    assert (back.obs_kind, back.image_layout, back.obs_dim, back.input_dtype) == ("Image", "HWC", 32 * 24 * 3, "uint8")
    with pytest.raises(ConfigError, match="uint8 observation shape"):
        space_spec(spaces.Box(0, 255, (32, 24, 5), np.uint8), spaces.Discrete(4), "X-v0")
    with pytest.raises(ConfigError, match="must span 0..255"):
        space_spec(spaces.Box(0, 1, (8, 8, 1), np.uint8), spaces.Discrete(4), "X-v0")


def test_area_matrix_averages_blocks():
    from msrl_consistent.networks.image import area_matrix
    m = area_matrix(4, 8)
    assert np.allclose(m.sum(1), 1.0) and np.allclose(m[1], [0, 0, 0.5, 0.5, 0, 0, 0, 0])
    m = area_matrix(3, 4)  # fractional overlaps: [0, 4/3), [4/3, 8/3), [8/3, 4)
    assert np.allclose(m[0], [0.75, 0.25, 0, 0]) and np.allclose(m[1], [0, 0.5, 0.5, 0])


def _encoder(shape, **kw):
    from types import SimpleNamespace

    from msrl_consistent.networks.image import ImageEncoder
    spec = space_spec(spaces.Box(0, 255, shape, np.uint8), spaces.Discrete(4))
    args = dict(cnn="small", grayscale=False, resize=None, ortho=True)
    args.update(kw)
    return ImageEncoder(np.random.default_rng(0), spec, **args), spec, SimpleNamespace


def test_image_preprocessing_inside_the_cell_matches_numpy():
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (2, 32, 24, 3)).astype(np.uint8)
    enc, spec, _ = _encoder((32, 24, 3), grayscale=True, resize=[16, 12])
    got = enc.preprocess(Tensor(frames.reshape(2, -1))).asnumpy()
    from msrl_consistent.networks.image import GRAY_WEIGHTS, area_matrix
    x = frames.astype(np.float64) / 255.0
    gray = (x * np.asarray(GRAY_WEIGHTS)).sum(-1)                     # (2, 32, 24)
    want = area_matrix(16, 32).astype(np.float64) @ gray @ area_matrix(12, 24).T.astype(np.float64)
    assert got.shape == (2, 1, 16, 12) and np.abs(got[:, 0] - want).max() < 1e-6
    # channels first or last: the same features for the same picture (the layout is handled once)
    enc_hwc, _, _ = _encoder((32, 24, 3))
    enc_chw, _, _ = _encoder((3, 32, 24))
    a = enc_hwc.preprocess(Tensor(frames.reshape(2, -1))).asnumpy()
    b = enc_chw.preprocess(Tensor(frames.transpose(0, 3, 1, 2).reshape(2, -1).copy())).asnumpy()
    assert np.array_equal(a, b)
    # uint8 and float32 inputs holding the same values give bit-identical features
    assert np.array_equal(enc_hwc(Tensor(frames.reshape(2, -1))).asnumpy(),
                          enc_hwc(Tensor(frames.reshape(2, -1).astype(np.float32))).asnumpy())


@pytest.mark.parametrize("shape, kw", [
    ((210, 160, 3), dict(grayscale=True, resize=[84, 84], cnn="nature")),  # Breakout's
    ((32, 24, 3), dict(resize=[16, 12])),
    ((3, 32, 24), {})])
def test_a_frame_preprocessed_alone_is_checked_against_its_stack(shape, kw):
    # the frame-wise rollout preprocesses only the newest frame and reuses the k - 1 earlier ones,
    # where frame_wise_exact finds each frame's bits alone equal to its bits in the stack, compiled
    # as the rollout compiles it (batches 8, 4, 1 on the machines measured; a MatMul kernel that
    # rounds otherwise at some size only turns the frame-wise rollout off); a frame one ulp off is found
    from dataclasses import replace

    from msrl_consistent.determinism import configure_mindspore
    from msrl_consistent.networks.image import ImageEncoder, frame_wise_exact
    configure_mindspore("CPU")
    spec = replace(space_spec(spaces.Box(0, 255, shape, np.uint8), spaces.Discrete(4)), frame_stack=3)
    enc = ImageEncoder(np.random.default_rng(0), spec, **dict(dict(cnn="small", grayscale=False, resize=None,
                                                                    ortho=True), **kw))
    assert frame_wise_exact(enc, (8, 4, 1))
    zeros = enc.preprocess_frame(Tensor(np.zeros((2, int(np.prod(shape))), np.uint8))).asnumpy()
    assert zeros.shape == (2, enc.out_shape[1] // 3) + enc.out_shape[2:] and not zeros.any()  # the carry's reset

    class OneUlpOff(ImageEncoder):
        def preprocess_frame(self, x):
            y = super().preprocess_frame(x)
            return y * (1.0 + 2.0 ** -23) + 2.0 ** -30  # nonzero values move by one ulp, zeros by 2^-30

    off = OneUlpOff(np.random.default_rng(0), spec, **dict(dict(cnn="small", grayscale=False, resize=None,
                                                                 ortho=True), **kw))
    assert not frame_wise_exact(off, (8,))


def test_nature_cnn_refuses_small_images_and_grayscale_needs_rgb():
    with pytest.raises(ConfigError, match="too small"):
        _encoder((32, 32, 3), cnn="nature")  # NatureCNN's 8/4, 4/2, 3/1 convs need 36x36
    with pytest.raises(ConfigError, match="grayscale needs 3"):
        _encoder((32, 32, 1), grayscale=True)
    enc, _, _ = _encoder((84, 84, 3), cnn="auto", grayscale=True)
    assert enc.cnn == "nature" and enc.out_dim == 512


@pytest.mark.parametrize("cnn,shape,resize", [("nature", (84, 84, 3), None), ("nature", (90, 87, 3), None),
                                               ("small", (32, 32, 3), None), ("small", (34, 31, 3), [30, 29])])
@pytest.mark.slow
def test_matmul_convs_equal_conv2d(cnn, shape, resize):
    """conv_impl 'matmul' (MatMulConv2d) and 'conv2d' (nn.Conv2d): the same parameters from the same
    seed, features equal within float32 rounding, gradients too; sizes that leave input rows and
    columns unused (90 x 87 for NatureCNN's 8/4 first layer, 31 for the small trunk) included."""
    import mindspore as ms
    from mindspore import ops
    frames = np.random.default_rng(1).integers(0, 256, (5,) + shape).astype(np.uint8).reshape(5, -1)
    x = Tensor(frames)
    encs = [_encoder(shape, cnn=cnn, resize=resize, conv_impl=impl)[0] for impl in ("matmul", "conv2d")]
    pa, pb = ({p.name: p.asnumpy() for p in e.trainable_params()} for e in encs)
    assert sorted(pa) == sorted(pb) and all(np.array_equal(pa[k], pb[k]) for k in pa)
    ya, yb = (e(x).asnumpy() for e in encs)
    assert ya.shape == yb.shape and np.abs(yb).max() > 0.1
    assert np.abs(ya - yb).max() <= 1e-5 * np.abs(yb).max()

    class Loss(ms.nn.Cell):
        def __init__(self, e):
            super().__init__()
            self.e = e

        def construct(self, x):
            return (self.e(x) ** 2).sum()

    grads = [ops.value_and_grad(Loss(e), None, e.trainable_params())(x)[1] for e in encs]
    names = [p.name for p in encs[0].trainable_params()]
    assert names == [p.name for p in encs[1].trainable_params()]
    for name, ga, gb in zip(names, *grads):
        ga, gb = ga.asnumpy(), gb.asnumpy()
        assert np.abs(gb).max() > 0 and np.abs(ga - gb).max() <= 1e-4 * np.abs(gb).max(), name


@pytest.mark.parametrize("m,oh,ow,f", [(2, 9, 9, 128), (3, 7, 7, 64), (2, 20, 20, 64), (3, 4, 6, 5)])
def test_conv_windows_equal_crops_and_concat_forward_and_backward(m, oh, ow, f):
    """networks.conv.Windows (one Gather; its backward written out) against the m*m Crops and a
    Concat under autodiff: the same windows, and the same input gradient, bit for bit (NatureCNN's
    three layers' sizes among them)."""
    import mindspore as ms
    from mindspore import nn, ops

    from msrl_consistent.networks.conv import Crop, Windows
    hb, wb = oh + m - 1, ow + m - 1

    class CropsConcat(nn.Cell):
        def __init__(self):
            super().__init__()
            self.crops = nn.CellList([Crop((0, a, b, 0), (0, oh, ow, f), (0, hb, wb, f))
                                      for a in range(m) for b in range(m)])

        def construct(self, x):
            return ops.concat([c(x) for c in self.crops], -1)

    class Loss(nn.Cell):
        def __init__(self, cell):
            super().__init__()
            self.cell = cell

        def construct(self, x, r):
            return (self.cell(x) * r).sum()

    rng = np.random.default_rng(4)
    x = Tensor(rng.standard_normal((3, hb, wb, f)).astype(np.float32))
    r = Tensor(rng.standard_normal((3, oh, ow, m * m * f)).astype(np.float32))
    cells = (Windows(m, oh, ow, hb, wb, f), CropsConcat())
    ya, yb = (c(x).asnumpy() for c in cells)
    assert ya.shape == (3, oh, ow, m * m * f) and np.array_equal(ya, yb)
    ga, gb = (ms.jit(ops.grad(Loss(c), 0))(x, r).asnumpy() for c in cells)
    assert np.abs(gb).max() > 0 and np.array_equal(ga, gb)


@pytest.mark.parametrize("rows,c", [(102400, 32), (20736, 64), (12544, 64), (3, 5)])
def test_conv_bias_add_has_the_broadcast_adds_values_and_gradients(rows, c):
    """networks.conv.BiasAdd (the MatMul convolutions' bias) against ``x + b`` under autodiff: the same
    sums and the same gradients of x and b, bit for bit, at NatureCNN's three layers' sizes at
    batch 256."""
    import mindspore as ms
    from mindspore import nn, ops

    from msrl_consistent.networks.conv import BiasAdd

    class Plus(nn.Cell):
        def construct(self, x, b):
            return x + b

    class Loss(nn.Cell):
        def __init__(self, cell):
            super().__init__()
            self.cell = cell

        def construct(self, x, b, r):
            return (self.cell(x, b) * r).sum()

    rng = np.random.default_rng(5)
    x, b, r = (Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((rows, c), (c,), (rows, c)))
    ya, yb = (cell(x, b).asnumpy() for cell in (BiasAdd(), Plus()))
    assert np.array_equal(ya, yb)
    (gxa, gba), (gxb, gbb) = ([g.asnumpy() for g in ms.jit(ops.grad(Loss(cell), (0, 1)))(x, b, r)]
                              for cell in (BiasAdd(), Plus()))
    assert np.abs(gbb).max() > 0 and np.array_equal(gxa, gxb) and np.array_equal(gba, gbb)


@pytest.mark.parametrize("shape,impl", [((84, 84, 3), "matmul"), ((90, 87, 3), "matmul"), ((84, 84, 3), "conv2d")])
def test_the_stored_rows_give_the_features_of_the_frames(shape, impl):
    """PPO's buffer stores ImageEncoder.stored rows (the first conv's blocks with the matmul convs);
    the trunk of them is, bit for bit, the trunk of the preprocessed frames, i.e. the cell's own
    features of the raw frames (a crop leaving rows unused included)."""
    from mindspore import nn

    enc = _encoder(shape, cnn="nature", conv_impl=impl)[0]

    class Both(nn.Cell):
        def __init__(self):
            super().__init__()
            self.enc = enc

        def construct(self, x):
            rows = self.enc.stored(self.enc.preprocess(x))
            return rows, self.enc.trunk(rows), self.enc(x)

    frames = np.random.default_rng(2).integers(0, 256, (5,) + shape).astype(np.uint8).reshape(5, -1)
    rows, from_rows, direct = (t.asnumpy() for t in Both()(Tensor(frames)))
    assert rows.shape == (5, enc.stored_dim)
    assert np.abs(direct).max() > 0 and np.array_equal(from_rows, direct)


@pytest.mark.slow
def test_matmul_convs_export_to_onnx_with_a_dynamic_batch(tmp_path):
    """NatureCNN's windows and a crop (90 x 87 leaves rows unused) through MindSpore's ONNX exporter:
    the batch stays dynamic (export/onnx.py's check: ONNX Runtime within 1e-5 of the cell at batch
    1, 7 and 256) and ONNX Runtime's 512 features at batch 64 match the cell's. ops.slice with a -1
    batch failed this check (its ONNX Slice dropped the last row: 0 rows at batch 1)."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import os
    import sys

    from mindspore import nn
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from export.onnx import write_onnx
    from msrl_consistent.deploy.graph_io import graph_inputs, obs_inputs
    enc, spec, _ = _encoder((90, 87, 3), cnn="nature", grayscale=True)

    class Features(nn.Cell):
        def __init__(self):
            super().__init__()
            self.e = enc

        def construct(self, x):
            return self.e(x)

    cell = Features()
    path = str(tmp_path / "features.onnx")
    info = write_onnx(cell, graph_inputs(obs_inputs(spec)), 8, path, dynamic=True)
    assert info["batch"] == "dynamic", info
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert "Gather" in {n.op_type for n in onnx.load(path).graph.node}
    x = np.random.default_rng(5).integers(0, 256, (64, spec.obs_dim)).astype(np.uint8)
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    want = cell(Tensor(x)).asnumpy()
    assert got.shape == want.shape == (64, 512) and np.abs(want).max() > 0.1
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_frame_stack_oldest_first_zeros_after_reset():
    from msrl_consistent.deploy import FrameStack
    st = FrameStack(3, 2)
    a = st.reset(np.array([[1, 1], [2, 2]]))
    assert a.tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 2, 2]]
    assert st.peek(np.array([[9, 9], [8, 8]])).tolist() == [[0, 0, 1, 1, 9, 9], [0, 0, 2, 2, 8, 8]]
    b = st.push(np.array([[3, 3], [4, 4]]), np.array([False, True]))
    assert b.tolist() == [[0, 0, 1, 1, 3, 3], [0, 0, 0, 0, 4, 4]]
    c = st.push(np.array([[5, 5], [6, 6]]))
    assert c.tolist() == [[1, 1, 3, 3, 5, 5], [0, 0, 4, 4, 6, 6]]


def test_image_act_validation_names_the_space():
    n = 2 * 4 * 4 * 3
    p = _Echo(SpaceSpec((4, 4, 3), np.zeros(n, np.float32), np.full(n, 255, np.float32), True, 4, obs_kind="Image",
                        image_layout="HWC", frame_stack=2), None)
    frame = np.full((4, 4, 3), 7, np.uint8)
    assert p.act(frame) == 0  # the first row holds the zeros of the fresh stack, then the frame
    assert p.act(frame) == 7  # now the oldest frame is the first one
    p.reset_frames()
    assert p.act(frame.astype(np.float32)) == 0  # integral floats in 0..255 are accepted
    for bad, what in ((np.zeros((4, 4, 1), np.uint8), "shape"), (np.full((4, 4, 3), 256.0), "got 256"),
                      (np.full((4, 4, 3), 0.5), "got 0.5"), (np.zeros((4, 4, 3), bool), "dtype bool")):
        with pytest.raises(ValueError, match=r"Image\(4, 4, 3\) uint8 frames.*" + what):
            p.act(bad)


def test_breakout_config_gives_stacked_raw_frames(configs_dir):
    pytest.importorskip("ale_py")  # the atari extra
    import os

    from msrl_consistent.envs import env_spec
    cfg = load_config(os.path.join(configs_dir, "ppo", "Breakout-v5.yaml"))
    spec = env_spec(cfg.env)
    assert (spec.obs_kind, spec.image_layout, spec.image_hwc, spec.frame_stack) == ("Image", "HWC", (210, 160, 3), 4)
    assert spec.obs_dim == 4 * 210 * 160 * 3 and spec.input_dtype == "uint8"
    assert (cfg.policy.cnn, cfg.policy.grayscale, cfg.policy.resize, cfg.policy.net_arch) == ("nature", True, [84, 84], [])


def test_conv_impl_auto_follows_the_device():
    from msrl_consistent.config import PolicyConfig
    from msrl_consistent.networks.encoders import conv_impl_for

    assert PolicyConfig().conv_impl == "auto"
    assert conv_impl_for("auto", "CPU") == "matmul"  # MindSpore's CPU Conv2D is the slow path
    assert conv_impl_for("auto", "Ascend") == "conv2d" and conv_impl_for("auto", "GPU") == "conv2d"
    assert conv_impl_for("conv2d", "CPU") == "conv2d" and conv_impl_for("matmul", "Ascend") == "matmul"


def test_max_and_skip_repeats_sums_and_pools_the_last_two_frames():
    from msrl_consistent.deploy import MaxAndSkip
    calls = []

    def step(action):  # frame t holds t at pixel t % 3: the pool of t-1 and t shows both
        t = len(calls)
        calls.append(action)
        frame = np.zeros((1, 3, 1), np.uint8)
        frame[0, t % 3, 0] = t + 1
        return frame, 1.5, False, False, {"t": t}

    obs, r, term, trunc, info = MaxAndSkip(4).repeat(step, 2)
    assert calls == [2, 2, 2, 2] and r == 6.0 and not term and not trunc and info == {"t": 3}
    assert obs[0, :, 0].tolist() == [4, 0, 3]  # frames 3 (t=2) and 4 (t=3), max per pixel
    assert MaxAndSkip(4).spec() == {"kind": "max_and_skip", "skip": 4, "pool": "max_last_2"}

    with pytest.raises(ValueError, match="skip >= 2"):
        MaxAndSkip(1)


def sb3_max_and_skip(skip):
    """Stable-Baselines3's MaxAndSkipEnv.step (atari_wrappers.py), transcribed: the reference."""
    buf = {}

    def step_fn(env_step, action):
        total, terminated, truncated = 0.0, False, False
        for i in range(skip):
            obs, reward, terminated, truncated, info = env_step(action)
            if "b" not in buf:
                buf["b"] = np.zeros((2,) + obs.shape, obs.dtype)  # _obs_buffer, made in __init__
            if i == skip - 2:
                buf["b"][0] = obs
            if i == skip - 1:
                buf["b"][1] = obs
            total += float(reward)
            if terminated or truncated:
                break
        return buf["b"].max(axis=0), total, terminated, truncated, info
    return step_fn


@pytest.mark.parametrize("skip", [2, 3, 4])
def test_max_and_skip_equals_sb3_including_episodes_that_end_inside_a_repeat(skip):
    from msrl_consistent.deploy import MaxAndSkip

    def frames(seed):  # random frames, episodes ending after every possible number of frames
        rng = np.random.default_rng(seed)
        ends = rng.random(400) < 0.15
        it = iter(range(400))

        def step(action):
            t = next(it)
            return rng.integers(0, 256, (3, 2, 3), np.uint8), float(t), bool(ends[t]), False, {"t": t}
        return step
    ours, ref = MaxAndSkip(skip), sb3_max_and_skip(skip)
    a, b = frames(skip), frames(skip)
    ended_at, last = set(), -1
    for _ in range(400 // skip - 1):
        o1, r1, t1, u1, i1 = ours.repeat(a, 1)
        o2, r2, t2, u2, i2 = ref(b, 1)
        assert np.array_equal(o1, o2) and r1 == r2 and t1 == t2 and u1 == u2 and i1 == i2, i1
        if t1:
            ended_at.add(i1["t"] - last)  # frames the repeat reached
        last = i1["t"]
    assert ended_at == set(range(1, skip + 1))  # episodes ended after every possible number of frames



def test_max_and_skip_env_config_manifest_and_policy(tmp_path):
    import gymnasium as gym
    import spaces_envs  # noqa: F401  (registers MsrlTestDot-v0)

    from msrl_consistent.config import EnvConfig
    from msrl_consistent.deploy import MaxAndSkip
    from msrl_consistent.envs import MaxAndSkipEnv, env_spec, make_env
    env = make_env(EnvConfig(id="MsrlTestDot-v0", max_and_skip=3))
    assert isinstance(env, MaxAndSkipEnv) and env.max_and_skip.skip == 3
    env.reset(seed=0)
    inner = gym.make("MsrlTestDot-v0")
    inner.reset(seed=0)
    # the same frames as three inner steps, pooled (the dot env does not flicker: the max is the last frame
    # where the agent stays, or shows both positions where it moved)
    f = [inner.step(1)[0] for _ in range(3)]
    assert np.array_equal(env.step(1)[0], np.maximum(f[1], f[2]))
    spec = env_spec(EnvConfig(id="MsrlTestDot-v0", max_and_skip=3, frame_stack=2))
    j = spec.to_json()
    assert j["observation"]["max_and_skip"] == {"kind": "max_and_skip", "skip": 3, "pool": "max_last_2"}
    assert SpaceSpec.from_json(j).max_and_skip == 3
    pol = _Echo(SpaceSpec.from_json(j), None)
    assert isinstance(pol.max_and_skip, MaxAndSkip) and pol.max_and_skip.skip == 3
    with pytest.raises(ConfigError, match="'env.max_and_skip' is 4, but the observation space is Box"):
        env_spec(EnvConfig(id="CartPole-v1", max_and_skip=4))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("algorithm: ppo\nenv:\n  id: CartPole-v1\n  max_and_skip: 0\n")
    with pytest.raises(ConfigError, match="max_and_skip"):
        load_config(str(cfg))


@pytest.mark.parametrize("action_space,sde", [(spaces.Discrete(5), None), (spaces.MultiDiscrete([3, 4, 2]), None),
                                              (spaces.MultiBinary(4), None), (spaces.Box(-2, 1, (3,)), None),
                                              (spaces.Box(-2, 1, (3,)), (8, 3))])
def test_distribution_mode_is_the_exported_head(action_space, sde):
    # the deterministic action the export computes is the mode of the distribution training samples from
    from msrl_consistent.distributions import action_distribution
    from msrl_consistent.networks.heads import make_head
    spec = space_spec(spaces.Box(-1, 1, (2,)), action_space)
    dist = action_distribution(spec, sde)
    out = Tensor(np.random.default_rng(0).normal(0, 3, (64, spec.logits_dim)).astype(np.float32))
    mode, head = dist.mode(out).asnumpy(), make_head(spec, squash=False)(out).asnumpy()
    assert mode.dtype == head.dtype and np.array_equal(mode, head)
    assert dist.noise(np.random.default_rng(1), 7).shape[0] == 7
