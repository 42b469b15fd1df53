"""Observation encoders: what turns the raw observation row into network input, inside the cell
(one-hot for Discrete, per-key features for Dict, preprocessing + CNN for images, a CNN per image
key beside the other keys for a Dict with images: several sensors)."""
from __future__ import annotations

from typing import Optional

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from ..deploy.fields import _width, image_layout
from ..deploy.spaces import SpaceSpec
from .image import ImageEncoder
from .mlp import Chain


class OneHot(nn.Cell):
    """A Discrete observation (its index as one float32 value, shape (B, 1)) -> one-hot (B, n).

    ``index == [0, 1, ..., n-1]`` as float32: an exact comparison (Equal + Cast in the exported
    graph, no OneHot operator, whose negative-index rule differs between runtimes). An index
    outside 0..n-1 gives the zero vector; deploy.Policy refuses such inputs before the cell."""

    def __init__(self, n: int):
        super().__init__()
        self.n = int(n)
        self.values = Tensor(np.arange(self.n, dtype=np.float32))

    def construct(self, x):
        return ops.cast(ops.equal(x, self.values), ms.float32)


class DictEncoder(nn.Cell):
    """A Dict observation row (its keys' values concatenated in sorted key order, a Discrete key
    as its index) -> the keys' features in the same order: a Box key's values as they are, a
    Discrete key one-hot. One constant Gather picks, for every feature, the row column it comes
    from; Equal against a constant gives the one-hot features; a constant 0/1 mask chooses
    between the two (``x * 1 + 0`` and ``x * 0 + onehot`` are exact), so the exported graph is
    Gather, Equal, Cast, Mul, Add for any mix of keys (no list op, no OneHot op)."""

    def __init__(self, parts):
        super().__init__()
        src, values, is_box = [], [], []
        col = 0
        for _, kind, n, shape in parts:
            if kind == "Discrete":
                src += [col] * n
                values += list(range(n))
                is_box += [0.0] * n
                col += 1
            else:
                w = int(np.prod(shape))
                src += list(range(col, col + w))
                values += [-1.0] * w  # never equal: the Box features take the raw value
                is_box += [1.0] * w
                col += w
        self.out_dim = len(src)
        self.src = Tensor(np.asarray(src, np.int32))
        self.values = Tensor(np.asarray(values, np.float32))
        self.box = Tensor(np.asarray(is_box, np.float32))
        self.onehot_mask = Tensor(1.0 - np.asarray(is_box, np.float32))

    def construct(self, x):
        g = ops.gather(x, self.src, 1)
        onehot = ops.cast(ops.equal(g, self.values), ms.float32)
        return g * self.box + onehot * self.onehot_mask


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


def conv_impl_for(conv_impl: str, device: str) -> str:
    """policy.conv_impl resolved: 'auto' is 'matmul' on the CPU device (MindSpore's CPU Conv2D is
    many times slower) and 'conv2d' on Ascend and GPU (a real Conv2D node, what their units run)."""
    if conv_impl == "auto":
        return "matmul" if device == "CPU" else "conv2d"
    return conv_impl


def obs_encoder(spec, rng=None, policy_cfg=None, device: str = "CPU"):
    """(encoder cell or None, features width) for the observation space: None for a Box (the
    network sees the normalized row as before), OneHot for a Discrete observation, DictEncoder
    for a Dict (each key's encoder, concatenated in the sorted key order of SpaceSpec.obs_parts),
    MultiInputEncoder for a Dict with image keys (a CNN per image key), ImageEncoder
    (preprocessing + CNN, weights from ``rng``) for an image."""
    if spec.obs_kind == "Image":
        pc = policy_cfg
        enc = ImageEncoder(rng, spec, pc.cnn, pc.grayscale, pc.resize, pc.ortho_init, conv_impl_for(pc.conv_impl, device))
        return enc, enc.out_dim
    if spec.obs_kind == "Discrete":
        return OneHot(spec.obs_n), spec.obs_n
    if spec.obs_kind == "Dict" and spec.image_parts:  # several sensors: a CNN per image key
        enc = MultiInputEncoder(spec, rng, policy_cfg, conv_impl_for(policy_cfg.conv_impl, device))
        return enc, enc.out_dim
    if spec.obs_kind == "Dict":
        enc = DictEncoder(spec.obs_parts)
        return enc, enc.out_dim
    return None, spec.obs_dim


def with_encoder(encoder: Optional[nn.Cell], net: nn.Cell) -> nn.Cell:
    """``net`` behind the observation encoder (the same encoder object for every network that
    sees observations); ``net`` itself for a Box observation (parameter names unchanged)."""
    return net if encoder is None else Chain(encoder, net)
