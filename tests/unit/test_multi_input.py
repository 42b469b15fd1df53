"""Several sensors without training: the packed row's order, the graph's inputs, the per-key
encoder, the exported graph's exact re-packing, and validation of Dict observations with image
keys at full size (a 210x160x3 camera)."""
import numpy as np
import pytest
from gymnasium import spaces
from mindspore import Tensor, nn

from msrl_consistent.config import ConfigError, PolicyConfig
from msrl_consistent.deploy import ExportError, Policy
from msrl_consistent.deploy.fields import _dict_parts, _Fields
from msrl_consistent.deploy.graph_io import graph_inputs, multi_input, obs_inputs, split_rows, zero_inputs
from msrl_consistent.deploy.spaces import SpaceSpec
from msrl_consistent.envs import flat_obs, space_spec
from msrl_consistent.networks.encoders import MultiInputEncoder, image_key_spec
from msrl_consistent.networks.image import ImageEncoder
from msrl_consistent.networks.multi_input import PackedInputs

# keys whose sorted order puts a vector key before the image: the row still holds the image first
SENSORS = spaces.Dict({"a_pos": spaces.Box(-1.0, 1.0, (2,), np.float32), "b_idx": spaces.Discrete(3),
                       "z_cam": spaces.Box(0, 255, (8, 8, 1), np.uint8)})


def _spec(space=SENSORS):
    return space_spec(space, spaces.Discrete(4), "Sensors-v0")


def _batch(rng, n, shape=(8, 8, 1)):
    return {"a_pos": rng.uniform(-1, 1, (n, 2)).astype(np.float32), "b_idx": rng.integers(0, 3, n),
            "z_cam": rng.integers(0, 256, (n, *shape)).astype(np.uint8)}


def test_the_packed_row_holds_image_keys_first_and_the_graph_one_input_per_key_kind():
    spec = _spec()
    assert [p[0] for p in spec.obs_parts] == ["z_cam", "a_pos", "b_idx"]
    assert spec.obs_parts[0] == ("z_cam", "Image", 256, (8, 8, 1)) and spec.obs_dim == 64 + 2 + 1
    assert spec.column_n[:64].tolist() == [256] * 64 and spec.column_n[64:].tolist() == [0, 0, 3]
    ins = obs_inputs(spec)
    assert multi_input(ins)
    assert [(i.name, i.keys, i.shape, i.dtype, i.start, i.stop) for i in ins] == [
        ("obs_z_cam", ("z_cam",), (8, 8, 1), "uint8", 0, 64), ("obs", ("a_pos", "b_idx"), (3,), "float32", 64, 67)]
    assert graph_inputs(ins, 16)[2:] == [("h", (16,), "float32"), ("c", (16,), "float32"), ("episode_start", (), "float32")]
    rng = np.random.default_rng(0)
    obs = _batch(rng, 5)
    row = flat_obs(obs, 5)
    frames, vec = split_rows(ins, row)
    assert frames.dtype == np.uint8 and np.array_equal(frames, obs["z_cam"])
    assert np.array_equal(vec, np.concatenate([obs["a_pos"], obs["b_idx"][:, None]], 1).astype(np.float32))
    assert [z.shape for z in zero_inputs(2, graph_inputs(ins))] == [(2, 8, 8, 1), (2, 3)]
    # the manifest's spaces give the same order back, whatever order its keys are listed in
    back = SpaceSpec.from_json(spec.to_json())
    assert back.obs_parts == spec.obs_parts and spec.to_json()["observation"]["keys"] == ["a_pos", "b_idx", "z_cam"]
    # without image keys nothing changes: one packed input, sorted keys
    plain = _spec(spaces.Dict({"b": spaces.Discrete(2), "a": spaces.Box(-1, 1, (2,), np.float32)}))
    assert [p[0] for p in plain.obs_parts] == ["a", "b"] and not multi_input(obs_inputs(plain))


def test_the_encoder_concatenates_per_key_features_in_sorted_key_order():
    spec = _spec()
    pc = PolicyConfig()
    enc = MultiInputEncoder(spec, np.random.default_rng(3), pc, "matmul")
    alone = ImageEncoder(np.random.default_rng(3), image_key_spec((8, 8, 1), "HWC"), pc.cnn, pc.grayscale, pc.resize,
                         pc.ortho_init, "matmul")  # the same weights: the first draws of the same stream
    assert enc.out_dim == 2 + 3 + alone.out_dim
    rng = np.random.default_rng(1)
    obs = _batch(rng, 4)
    out = enc(Tensor(flat_obs(obs, 4))).asnumpy()
    assert np.array_equal(out[:, :2], obs["a_pos"])
    assert np.array_equal(out[:, 2:5], np.eye(3, dtype=np.float32)[obs["b_idx"]])
    assert np.array_equal(out[:, 5:], alone(Tensor(obs["z_cam"].reshape(4, -1))).asnumpy())


def test_the_exported_graph_repacks_its_inputs_exactly():
    spec = _spec()
    enc = MultiInputEncoder(spec, np.random.default_rng(0), PolicyConfig(), "matmul")

    class Cell(nn.Cell):  # stands for the policy cell: the packed row in, features out
        def __init__(self):
            super().__init__()
            self.enc = enc

        def construct(self, x):
            return self.enc(x)

    cell = Cell()
    row = flat_obs(_batch(np.random.default_rng(2), 6), 6)
    graph = PackedInputs(cell, obs_inputs(spec))
    got = graph(*(Tensor(x) for x in split_rows(obs_inputs(spec), row))).asnumpy()
    assert np.array_equal(got, cell(Tensor(row)).asnumpy())


class _First(Policy):
    """A deploy.Policy whose 'model' returns column 0 of the packed row (the camera's first pixel) mod 4."""

    def _run(self, x):
        return (x[:, 0] % 4).astype(np.int32)


def test_dict_observations_with_a_full_size_camera_are_validated_and_packed():
    space = spaces.Dict({"camera": spaces.Box(0, 255, (210, 160, 3), np.uint8),
                         "speed": spaces.Box(-10.0, 10.0, (1,), np.float32)})
    p = _First(_spec(space), None)
    assert p.obs_dim == 210 * 160 * 3 + 1
    frame = np.full((210, 160, 3), 7, np.uint8)
    assert p.act({"camera": frame, "speed": np.array([0.5], np.float32)}) == 3
    batch = {"camera": np.stack([frame, frame * 0 + 2]), "speed": np.zeros((2, 1), np.float32)}
    assert p.act(batch).tolist() == [3, 2]
    assert p.act({"camera": frame.astype(np.float64), "speed": np.zeros(1)}) == 3  # integral values are pixels
    half = frame.astype(np.float32)
    half[100, 80, 1] = 0.5
    with pytest.raises(ValueError, match=r"key 'camera' of Dict\(camera: Image\(210, 160, 3\) uint8, speed: Box\(1,\)\): "
                                         r"uint8 pixels \(values 0..255\), got 0.5"):
        p.act({"camera": half, "speed": np.zeros(1, np.float32)})
    with pytest.raises(ValueError, match=r"key 'camera' .*expected shape \(210, 160, 3\)"):
        p.act({"camera": frame[:, :, :1], "speed": np.zeros(1, np.float32)})
    row = flat_obs({"camera": frame, "speed": np.zeros(1, np.float32)}, 1)
    row[0, 5] = 256.0
    with pytest.raises(ValueError, match="column 5 of the packed row holds an image pixel"):
        p.act(row)


def test_manifest_image_keys_are_checked():
    def parts(sub, key="cam"):
        return _dict_parts(_Fields({"spaces": {"observation": {"keys": [key], "spaces": {key: sub}}}}))

    good = {"type": "Image", "shape": [16, 16, 3], "layout": "HWC", "dtype": "uint8"}
    assert parts(good) == [("cam", "Image", 256, (16, 16, 3))]
    for bad in (dict(good, layout="CHW"), dict(good, dtype="float32"), dict(good, shape=[16])):
        with pytest.raises(ExportError, match="field 'spaces.observation.spaces.cam'"):
            parts(bad)
    with pytest.raises(ExportError, match="an image key of letters, digits and '_'"):
        parts(good, key="front;cam")
    with pytest.raises(ConfigError, match="an image key names its graph input"):
        _spec(spaces.Dict({"front;cam": spaces.Box(0, 255, (8, 8, 1), np.uint8)}))
