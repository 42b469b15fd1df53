"""The training loop's acting call returns one packed matrix; unpacking gives back the rollout
cell's four outputs exactly (values, dtypes and shapes), discrete and continuous."""
import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from msrl_consistent.algorithms.on_policy import PackedRollout, unpack_rollout
from msrl_consistent.determinism import configure_mindspore


class FakeRollout(nn.Cell):
    def __init__(self, discrete: bool):
        super().__init__()
        self.discrete = discrete

    def construct(self, obs, noise):
        if self.discrete:
            action = ops.argmax(obs[:, :3] + noise, -1).astype(ms.int32)
            return action, action, obs[:, 0] * 0.5, obs[:, 1] - 1.0
        action = obs[:, :2] + noise
        return ops.clip_by_value(action, -1.0, 1.0), action, obs[:, 2] * 3.0, obs[:, 3] / 7.0


def test_unpack_gives_back_every_output_exactly():
    configure_mindspore("CPU")
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(5, 4)).astype(np.float32) * 3
    for discrete, noise_dim, act_shape in ((True, 3, ()), (False, 2, (2,))):
        noise = rng.normal(size=(5, noise_dim)).astype(np.float32)
        cell = FakeRollout(discrete)
        want = [o.asnumpy() for o in cell(Tensor(obs), Tensor(noise))]
        got = unpack_rollout(PackedRollout(cell)(Tensor(obs), Tensor(noise)).asnumpy(), act_shape, discrete)
        for w, g in zip(want, got):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert np.array_equal(g, w)
        assert not np.array_equal(got[0], got[1]) or discrete  # env action (clipped) and action differ
        assert got[4] is None  # no stored rows


class FakeImageRollout(FakeRollout):
    """A rollout cell with a fifth output: the rows the buffer stores (PPO's preprocessed frames)."""

    def construct(self, obs, noise):
        env_a, a, logp, v = super().construct(obs, noise)
        return env_a, a, logp, v, obs / 255.0


def test_unpack_gives_back_the_stored_rows_exactly():
    configure_mindspore("CPU")
    rng = np.random.default_rng(1)
    obs = rng.integers(0, 256, size=(3, 6)).astype(np.float32)
    noise = rng.normal(size=(3, 3)).astype(np.float32)
    cell = FakeImageRollout(True)
    want = [o.asnumpy() for o in cell(Tensor(obs), Tensor(noise))]
    got = unpack_rollout(PackedRollout(cell)(Tensor(obs), Tensor(noise)).asnumpy(), (), True)
    assert len(got) == 5
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)
