"""Several sensors: a Dict observation with image keys beside Box and Discrete keys (SB3's
MultiInputPolicy / CombinedExtractor).

The training cell sees one packed float32 row (SpaceSpec.obs_parts: the image keys' pixels as
values 0..255 first, then the other keys); :class:`MultiInputEncoder` cuts it per key (a CNN per
image key, a Box key's values as they are, a Discrete key one-hot) and concatenates the
features in sorted key order. The exported graph takes the image keys' raw uint8 frames and the
other keys' float32 row as separate inputs (deploy.graph_io); :class:`PackedInputs` joins them
back into the packed row in front of the very training cell, with ops that are exact (Cast of
uint8 to float32, Reshape, Concat), so the exported graph computes what the training cell
computes, bit for bit."""
from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from ..deploy.fields import _width, image_layout
from ..deploy.spaces import SpaceSpec
from .encoders import OneHot
from .image import ImageEncoder


def image_key_spec(key_shape, layout: str) -> SpaceSpec:
    """The SpaceSpec of one image key, as an Image observation of its own (for ImageEncoder)."""
    size = int(np.prod(key_shape))
    return SpaceSpec(tuple(key_shape), np.zeros(size, np.float32), np.full(size, 255.0, np.float32), True, 1,
                     obs_kind="Image", image_layout=layout)


class MultiInputEncoder(nn.Cell):
    """Packed Dict rows -> per-key features concatenated in sorted key order: each image key's
    columns (one constant Gather) through its own ImageEncoder (cast, /255, optional grayscale
    and resize, CNN; weights from ``rng`` in sorted key order), each Box key's columns as they
    are, each Discrete key's index one-hot (encoders.OneHot)."""

    def __init__(self, spec, rng, policy_cfg, conv_impl: str):
        super().__init__()
        pc = policy_cfg
        cols, col = {}, 0
        for part in spec.obs_parts:
            cols[part[0]] = (part, np.arange(col, col + _width(part), dtype=np.int32))
            col += _width(part)
        self.keys = sorted(cols)
        self.idx = [Tensor(cols[k][1]) for k in self.keys]
        encoders, width = [], 0
        for k in self.keys:
            _, kind, n, shape = cols[k][0]
            if kind == "Image":
                enc = ImageEncoder(rng, image_key_spec(shape, image_layout(shape)), pc.cnn, pc.grayscale, pc.resize,
                                   pc.ortho_init, conv_impl)
                encoders.append(enc)
                width += enc.out_dim
            elif kind == "Discrete":
                encoders.append(OneHot(n))
                width += n
            else:
                encoders.append(nn.Identity())
                width += len(cols[k][1])
        self.encoders = nn.CellList(encoders)
        self.out_dim = width

    def construct(self, x):
        feats = []
        for i in range(len(self.keys)):
            feats.append(self.encoders[i](ops.gather(x, self.idx[i], 1)))
        return ops.concat(feats, 1)


class PackedInputs(nn.Cell):
    """The exported graph of a multi-input policy: its inputs (each image key's uint8 frames,
    then the float32 row of the other keys, then a recurrent cell's h, c, episode_start)
    joined back into the packed row, then ``cell``. ``obs_inputs``: deploy.graph_io.obs_inputs,
    in the packed row's order."""

    def __init__(self, cell: nn.Cell, obs_inputs):
        super().__init__()
        self.cell = cell
        self.n_obs = len(obs_inputs)
        self.flat = [(-1, int(i.stop - i.start)) for i in obs_inputs]

    def construct(self, *xs):
        rows = []
        for i in range(self.n_obs):
            rows.append(ops.cast(xs[i].reshape(self.flat[i]), ms.float32))
        return self.cell(ops.concat(rows, 1), *xs[self.n_obs:])
