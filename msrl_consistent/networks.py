"""MLP trunks, action heads and the deterministic policy cell (obs-norm -> net -> action head).

Weights are initialized on the host from the run's seeded NumPy Generator (orthogonal
init as in Stable-Baselines3 / CleanRL), so initialization is reproducible independently
of MindSpore's random kernels.

:class:`PolicyCell` is the export target. It holds *the same* normalizer and actor
sub-cells (the same Parameter objects) that the training losses use, followed by the
action post-processing of the consistency contract:

* discrete: ``argmax`` of the logits, as int32 (int32 inside the cell so ONNX Runtime
  loads the exported graph);
* continuous, unsquashed (PPO): the mean clipped to the Box bounds;
* continuous, squashed (SAC, TD3): ``low + (tanh(u) + 1) / 2 * (high - low)``, clipped.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.ops.operations._grad_ops import TanhGrad  # the kernel behind ops.tanh's own gradient

from .normalization import ObsNormalizer


def accurate_tanh(x):
    """tanh(x) = 2 * sigmoid(2x) - 1: four kernels, saturating to exactly +-1, no overflow.

    MindSpore 2.10's CPU Tanh kernel is an approximation: max error 1.0e-4 against the exact
    value (measured on [-6, 6]), which made a trained Pendulum policy's training cell and its
    ONNX Runtime export disagree by 1.2e-4. This form is within 1.7e-6 of the exact tanh on
    [-20, 20] (1.2e-7 absolute near 0), as accurate as the nine-kernel sign/exp form it replaced
    (max 1.6e-6) at under half the cost (a PPO minibatch evaluates it four times on 256 x 64)."""
    return 2.0 * ops.sigmoid(2.0 * x) - 1.0


class Tanh(nn.Cell):
    """The tanh activation of every msrl network: accurate_tanh forward, and the backward
    ``dout * (1 - y^2)`` (PyTorch's tanh_backward) in one kernel, MindSpore's own TanhGrad
    (it rounds ``1 - y^2`` once, as a fused multiply-add), instead of differentiating
    accurate_tanh's ops. Only training arithmetic depends on it; the exported graph holds the
    forward alone."""

    def __init__(self):
        super().__init__()
        self.grad = TanhGrad()

    def construct(self, x):
        return accurate_tanh(x)

    def bprop(self, x, out, dout):
        return (self.grad(out, dout),)


ACTIVATIONS = {"tanh": Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU}


def orthogonal(rng: np.random.Generator, out_dim: int, in_dim: int, gain: float) -> np.ndarray:
    """Orthogonal matrix (Saxe et al. 2014), computed with NumPy from the given Generator."""
    a = rng.standard_normal((max(out_dim, in_dim), min(out_dim, in_dim)))
    q, r = np.linalg.qr(a)
    q *= np.sign(np.diag(r))
    if out_dim < in_dim:
        q = q.T
    return (gain * q[:out_dim, :in_dim]).astype(np.float32)


def dense(rng: np.random.Generator, in_dim: int, out_dim: int, gain: float, ortho: bool = True) -> nn.Dense:
    """nn.Dense with host-side init: orthogonal(gain) and zero bias, or PyTorch's uniform default."""
    if ortho:
        w = orthogonal(rng, out_dim, in_dim, gain)
        b = np.zeros(out_dim, np.float32)
    else:
        bound = 1.0 / np.sqrt(in_dim)
        w = rng.uniform(-bound, bound, (out_dim, in_dim)).astype(np.float32)
        b = rng.uniform(-bound, bound, (out_dim,)).astype(np.float32)
    return nn.Dense(in_dim, out_dim, weight_init=Tensor(w), bias_init=Tensor(b))


class MLP(nn.Cell):
    """Dense -> activation, for each hidden size; optional output layer without activation."""

    def __init__(self, rng, in_dim: int, hidden: Sequence[int], activation: str,
                 out_dim: Optional[int] = None, out_gain: float = 1.0, ortho: bool = True,
                 out_activation: Optional[str] = None):
        super().__init__()
        layers: List[nn.Cell] = []
        d = in_dim
        for h in hidden:
            layers += [dense(rng, d, h, float(np.sqrt(2.0)), ortho), ACTIVATIONS[activation]()]
            d = h
        if out_dim is not None:
            layers.append(dense(rng, d, out_dim, out_gain, ortho))
            d = out_dim
            if out_activation:
                layers.append(ACTIVATIONS[out_activation]())
        self.out_dim = d
        self.layers = nn.SequentialCell(layers)

    def construct(self, x):
        return self.layers(x)


class Chain(nn.Cell):
    """``second(first(x))``: lets a shared trunk feed two heads without copying it."""

    def __init__(self, first: nn.Cell, second: nn.Cell):
        super().__init__()
        self.first = first
        self.second = second

    def construct(self, x):
        return self.second(self.first(x))


# ---------------------------------------------------------------------------------------
# Observation encoders: what turns the raw observation row into network input, inside the cell
# ---------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------
# Image observations: the whole preprocessing inside the cell, then a convolutional trunk
# ---------------------------------------------------------------------------------------
GRAY_WEIGHTS = (0.299, 0.587, 0.114)
"""RGB -> gray luma weights (ITU-R BT.601, as OpenCV's COLOR_RGB2GRAY)."""


def area_matrix(n_out: int, n_in: int) -> np.ndarray:
    """(n_out, n_in) weights of area resampling along one axis: output pixel i is the mean of the
    input interval [i * n_in / n_out, (i + 1) * n_in / n_out), partial pixels weighted by their
    overlap (OpenCV's INTER_AREA for shrinking). ImageEncoder resizes the rows with its nonzero
    taps (area_taps: Gathers, Muls, Adds) and the columns with it as one MatMul, inside the graph
    (no Resize operator: the same arithmetic in MindIR, ONNX and OM)."""
    m = np.zeros((n_out, n_in), np.float64)
    scale = n_in / n_out
    for i in range(n_out):
        lo, hi = i * scale, (i + 1) * scale
        for j in range(int(np.floor(lo)), min(int(np.ceil(hi)), n_in)):
            m[i, j] = max(0.0, min(hi, j + 1) - max(lo, j))
    return (m / m.sum(1, keepdims=True)).astype(np.float32)


def area_taps(n_out: int, n_in: int):
    """The nonzero entries of ``area_matrix(n_out, n_in)`` as taps: (indices, weights), each of shape
    (taps, n_out); output pixel i is ``sum_t w[t, i] * x[idx[t, i]]`` (rows with fewer nonzeros pad
    with index 0 and weight 0). At most ceil(n_in / n_out) + 1 taps: 3 for 210 -> 84 and 160 -> 84."""
    m = area_matrix(n_out, n_in)
    taps = int((m > 0).sum(1).max())
    idx = np.zeros((taps, n_out), np.int32)
    w = np.zeros((taps, n_out), np.float32)
    for i in range(n_out):
        js = np.nonzero(m[i])[0]
        idx[:len(js), i] = js
        w[:len(js), i] = m[i, js]
    return idx, w


class Crop(nn.Cell):
    """``x[:, b1:b1+n1, b2:b2+n2, b3:b3+n3]`` of a 4-D tensor (any batch size) as Gathers with constant
    indices: one Gather over the merged dims 1 and 2 when dim 3 is kept whole (the conv windows,
    each index copying a contiguous row), else one Gather per cropped dim. Not tensor indexing:
    MindSpore 2.10's CPU StridedSlice copies ~50M floats/s (120 ms for one 256 x 20 x 20 x 64 window);
    not ops.slice: it needs the batch size, and -1 there exports to an ONNX Slice that drops the
    last row. Backward: ``dout`` zero-padded back to the input shape (Concats with zeros). Only training
    depends on the backward; the exported graph holds the Gathers (ONNX Gather)."""

    def __init__(self, begin, size, full):
        super().__init__()
        b, n, f = [int(v) for v in begin], [int(v) for v in size], [int(v) for v in full]
        # the backward: dout zero-padded back to the input shape, as Concats with zero blocks (the
        # same values as ops.pad; MindSpore 2.10's CPU PadV3 took 14-26 ms for a 256 x 9 x 9 x 128
        # gradient, the Concats 1.7 ms)
        self.zero_pads = tuple((d, b[d], f[d] - b[d] - n[d]) for d in (1, 2, 3) if n[d] != f[d])
        self.flat = b[3] == 0 and n[3] == f[3]
        self.idx1 = self.idx2 = self.idx3 = None
        if self.flat:
            rows = np.arange(b[1], b[1] + n[1])[:, None] * f[2] + np.arange(b[2], b[2] + n[2])[None, :]
            self.idx1 = Tensor(rows.reshape(-1).astype(np.int32))
            self.merged = (-1, f[1] * f[2], f[3])
            self.out_shape = (-1, n[1], n[2], n[3])
        else:
            for d in (1, 2, 3):
                if n[d] != f[d]:
                    setattr(self, f"idx{d}", Tensor(np.arange(b[d], b[d] + n[d], dtype=np.int32)))

    def construct(self, x):
        if self.flat:
            return ops.gather(x.reshape(self.merged), self.idx1, 1).reshape(self.out_shape)
        if self.idx1 is not None:
            x = ops.gather(x, self.idx1, 1)
        if self.idx2 is not None:
            x = ops.gather(x, self.idx2, 2)
        if self.idx3 is not None:
            x = ops.gather(x, self.idx3, 3)
        return x

    def bprop(self, x, out, dout):
        g = dout
        for d, before, after in self.zero_pads:
            shape = g.shape
            if before:
                g = ops.concat((ops.zeros(shape[:d] + (before,) + shape[d + 1:], g.dtype), g), d)
            if after:
                g = ops.concat((g, ops.zeros(shape[:d] + (after,) + shape[d + 1:], g.dtype)), d)
        return (g,)


class MatMulConv2d(nn.Cell):
    """A 'valid' convolution whose kernel size is a multiple of its stride, as Gather / Reshape /
    Transpose / Concat and one MatMul: what NatureCNN's 8x8/4, 4x4/2 and 3x3/1 layers (and the
    'small' trunk's 4x4/4, 2x2/2) compute, 12-60x faster than MindSpore 2.10's CPU Conv2D (the
    whole NatureCNN encoder with its preprocessing ~5x: docs/benchmarks.md,
    benchmarks/cnn_step_cost.py), equal to it within float32 rounding.

    Space-to-depth by the stride s turns the input into (B, H/s, W/s, C*s*s) blocks; the conv is
    then an m x m, stride-1 conv over blocks (m = kernel / s), i.e. the m*m shifted block windows
    concatenated (im2col, Gathers: see Crop) times the weight as a matrix. The parameters are
    nn.Conv2d's: ``weight`` (out, in, k, k) and ``bias`` (out,), the same names, shapes and init, so a checkpoint fits
    either implementation; the weight is rearranged to the matrix inside the graph. Input NCHW
    (``nchw_in``, the first layer) or NHWC; output NHWC (ImageEncoder transposes the last layer's
    output back to NCHW before flattening, so the Dense after it sees Conv2d's feature order)."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray, stride: int, in_hw, nchw_in: bool):
        super().__init__()
        c_out, c_in, k, _ = weight.shape
        s = int(stride)
        if k % s:
            raise ValueError(f"MatMulConv2d needs kernel % stride == 0, got kernel {k}, stride {s}")
        self.weight = ms.Parameter(Tensor(weight), name="weight")
        self.bias = ms.Parameter(Tensor(bias), name="bias")
        h, w = int(in_hw[0]), int(in_hw[1])
        m = k // s
        oh, ow = (h - k) // s + 1, (w - k) // s + 1
        hb, wb = oh - 1 + m, ow - 1 + m  # the blocks the output reads; the rest of the input is unused
        self.nchw_in = bool(nchw_in)
        full = (0, c_in, h, w) if self.nchw_in else (0, h, w, c_in)
        used = (0, c_in, hb * s, wb * s) if self.nchw_in else (0, hb * s, wb * s, c_in)
        self.crop = None if used == full else Crop((0, 0, 0, 0), used, full)
        if self.nchw_in:  # (B, C, hb, s, wb, s) -> (B, hb, wb, C, s, s)
            self.blocks, self.perm = (-1, c_in, hb, s, wb, s), (0, 2, 4, 1, 3, 5)
        else:  # (B, hb, s, wb, s, C) -> (B, hb, wb, C, s, s)
            self.blocks, self.perm = (-1, hb, s, wb, s, c_in), (0, 1, 3, 5, 2, 4)
        self.flat_blocks = (-1, hb, wb, c_in * s * s)
        self.windows = None if m == 1 else nn.CellList(
            [Crop((0, a, b, 0), (0, oh, ow, c_in * s * s), (0, hb, wb, c_in * s * s))
             for a in range(m) for b in range(m)])
        # weight (out, in, [a, sh], [b, sw]) -> rows ordered (a, b, in, sh, sw), as the windows' features
        self.w_blocks = (c_out, c_in, m, s, m, s)
        self.cols = m * m * c_in * s * s
        self.c_out = c_out
        self.out_shape = (-1, oh, ow, c_out)
        self.matmul = ops.MatMul()  # its gradient uses MatMul's transpose flags, no Transpose kernels

    def construct(self, x):
        if self.crop is not None:
            x = self.crop(x)
        x = ops.transpose(x.reshape(self.blocks), self.perm).reshape(self.flat_blocks)
        if self.windows is not None:
            parts = []
            for window in self.windows:
                parts.append(window(x))
            x = ops.concat(parts, -1)
        w = ops.transpose(self.weight.reshape(self.w_blocks), (2, 4, 1, 3, 5, 0)).reshape((self.cols, self.c_out))
        y = self.matmul(x.reshape((-1, self.cols)), w) + self.bias
        return y.reshape(self.out_shape)


CONV_IMPLS = ("matmul", "conv2d")


def conv(rng, c_in: int, c_out: int, k: int, stride: int, ortho: bool, impl: str = "conv2d", in_hw=None,
         nchw_in: bool = True) -> nn.Cell:
    """A 'valid' convolution with host-side init: orthogonal(sqrt(2)) on the (c_out, c_in*k*k)
    matrix and zero bias (SB3's NatureCNN init), or PyTorch's default uniform. ``impl`` 'conv2d':
    nn.Conv2d (NCHW); 'matmul': MatMulConv2d (the same parameters and init; input ``in_hw``)."""
    fan_in = c_in * k * k
    if ortho:
        w = orthogonal(rng, c_out, fan_in, float(np.sqrt(2.0))).reshape(c_out, c_in, k, k)
        b = np.zeros(c_out, np.float32)
    else:
        bound = 1.0 / np.sqrt(fan_in)
        w = rng.uniform(-bound, bound, (c_out, c_in, k, k)).astype(np.float32)
        b = rng.uniform(-bound, bound, (c_out,)).astype(np.float32)
    if impl == "matmul":
        return MatMulConv2d(w, b, stride, in_hw, nchw_in)
    if impl != "conv2d":
        raise ValueError(f"conv impl must be one of {CONV_IMPLS}, got {impl!r}")
    return nn.Conv2d(c_in, c_out, k, stride, pad_mode="valid", has_bias=True, weight_init=Tensor(w),
                     bias_init=Tensor(b))


CNN_LAYERS = {
    # (out channels, kernel, stride) per conv layer, then the features width
    "nature": (((32, 8, 4), (64, 4, 2), (64, 3, 1)), 512),   # Mnih et al. 2015, SB3's NatureCNN
    # images smaller than 64x64: non-overlapping (kernel = stride) convs, ~150k multiply-adds for a
    # 32x32 frame (NatureCNN-like 3x3/2 layers cost 13x more, measured ~5 s per 256-frame minibatch
    # update on this 2-core CPU)
    "small": (((16, 4, 4), (32, 2, 2)), 128),
}


def cnn_out_size(size: int, layers) -> int:
    for _, k, s in layers:
        size = (size - k) // s + 1
    return size


class ImageEncoder(nn.Cell):
    """A raw image observation row (uint8 values, k stacked frames, flattened) -> CNN features.

    Everything that changes the numbers is here, so the exported graph consumes the raw frame:
    reshape to (B, k, H, W, C) (or (B, k, C, H, W) for a channels-first space; the one place the
    channel order is handled), cast to float32 and divide by 255, optional grayscale (luma
    weights), optional area resize (rows: Gathers of the <= 3 rows each output row covers; columns: one
    MatMul with a constant matrix), then the conv trunk
    (ReLU after every layer, flatten, Dense, ReLU). ``conv_impl`` 'matmul' (MatMulConv2d, NHWC
    between the layers) or 'conv2d' (nn.Conv2d): the same parameters, init and features."""

    def __init__(self, rng, spec, cnn: str, grayscale: bool, resize, ortho: bool, conv_impl: str = "matmul"):
        super().__init__()
        from .config import ConfigError
        h, w, c = spec.image_hwc
        k = spec.frame_stack
        self.channels_last = spec.image_layout == "HWC"
        self.grayscale = bool(grayscale)
        if self.grayscale and c != 3:
            raise ConfigError(f"key 'policy.grayscale' is true, but the image has {c} channel(s); grayscale "
                              f"needs 3 (RGB)")
        c_out = 1 if self.grayscale else c
        self.resize = resize is not None
        oh, ow = (int(resize[0]), int(resize[1])) if self.resize else (h, w)
        if self.channels_last:  # rows of W*C contiguous values; the row resize gathers whole rows
            self.in_shape, self.row_axis, self.hwc = (-1, k, h, w * c), 2, (-1, k, oh, w, c)
            self.pixels = (-1, c)  # grayscale as one (pixels, 3) x (3, 1) MatMul: 5x faster than Mul + ReduceSum here
            self.gray = Tensor(np.asarray(GRAY_WEIGHTS, np.float32).reshape(3, 1))
        else:
            self.in_shape, self.row_axis = (-1, k, c, h, w), 3
            self.gray = Tensor(np.asarray(GRAY_WEIGHTS, np.float32).reshape(1, 1, 3, 1, 1))
        if self.grayscale:  # gray first: the rest works on a third of the values
            self.gray_shape, self.row_axis = (-1, k, h, w), 2
        self.rows_2d = (-1, w)
        self.matmul = ops.MatMul()  # grayscale (channels last) and the column resize
        self.stacked = (-1, k * c_out, oh, w)
        self.out_shape = (-1, k * c_out, oh, ow)
        if self.resize:
            idx, wt = area_taps(oh, h)
            self.row_idx = [Tensor(i) for i in idx]
            self.row_w = [Tensor(v.reshape(oh, 1)) for v in wt]
            self.rw_t = Tensor(area_matrix(ow, w).T.copy())
        else:
            self.row_idx, self.row_w, self.rw_t = [], [], None
        if cnn == "auto":
            cnn = "nature" if min(oh, ow) >= 64 else "small"
        layers, feat = CNN_LAYERS[cnn]
        if cnn_out_size(min(oh, ow), layers) < 1:
            raise ConfigError(f"key 'policy.cnn' is {cnn!r}, but a {oh}x{ow} image is too small for it "
                              f"(use 'small', or policy.resize)")
        convs: List[nn.Cell] = []
        ch = k * c_out
        hw = (oh, ow)
        for out, ks, st in layers:
            convs += [conv(rng, ch, out, ks, st, ortho, conv_impl, hw, not convs), nn.ReLU()]
            ch = out
            hw = ((hw[0] - ks) // st + 1, (hw[1] - ks) // st + 1)
        self.convs = nn.SequentialCell(convs)
        self.conv_impl = conv_impl
        self.nhwc_out = conv_impl == "matmul"
        n_flat = ch * hw[0] * hw[1]  # the last conv's output size
        self.n_flat = n_flat
        self.fc = nn.SequentialCell([dense(rng, n_flat, feat, float(np.sqrt(2.0)), ortho), nn.ReLU()])
        self.out_dim = feat
        self.cnn = cnn
        self.preprocessed_dim = k * c_out * oh * ow  # width of one preprocessed row (PPO's rollout buffer)

    def preprocess(self, x):
        """Raw rows -> (B, k * channels, height, width) float32 in [0, 1], resized: what the convs see.

        Cast to float32; grayscale (luma weights over the channel axis; one MatMul for
        channels-last frames); area resize of the rows (each output row the weighted sum of the
        <= 3 input rows it covers: Gathers of whole rows, exact per element); area resize of the
        columns (one MatMul with a constant (W, W') matrix); /255 last, on the smallest tensor.
        Without grayscale, channels-last frames are turned channels-first after the row resize.
        No gradient flows into it (it has no parameters)."""
        x = ops.cast(x, ms.float32).reshape(self.in_shape)
        if self.grayscale:
            if self.channels_last:
                x = self.matmul(x.reshape(self.pixels), self.gray)
            else:
                x = (x * self.gray).sum(2)
            x = x.reshape(self.gray_shape)
        if self.resize:
            acc = ops.gather(x, self.row_idx[0], self.row_axis) * self.row_w[0]
            for i in range(1, len(self.row_idx)):
                acc = acc + ops.gather(x, self.row_idx[i], self.row_axis) * self.row_w[i]
            x = acc
        if self.channels_last and not self.grayscale:
            x = ops.transpose(x.reshape(self.hwc), (0, 1, 4, 2, 3))
        x = x.reshape(self.stacked)
        if self.resize:
            x = self.matmul(x.reshape(self.rows_2d), self.rw_t).reshape(self.out_shape)
        return ops.stop_gradient(x / 255.0)

    def construct(self, x):
        return self.trunk(self.preprocess(x))

    def trunk(self, x):
        """Preprocessed frames (``preprocess``'s output, or its rows flattened) -> features: the convs,
        flatten, Dense, ReLU. PPO's update phase starts here, from the frames its rollout cell
        preprocessed (PPORollout's pre-encoded output), so no frame is preprocessed twice."""
        x = self.convs(x.reshape(self.out_shape))
        if self.nhwc_out:
            x = ops.transpose(x, (0, 3, 1, 2))  # Conv2d's (C, H, W) flatten order for the Dense
        return self.fc(x.reshape((-1, self.n_flat)))  # -1, not x.shape[0]: a dynamic batch in ONNX


def conv_impl_for(conv_impl: str, device: str) -> str:
    """policy.conv_impl resolved: 'auto' is 'matmul' on the CPU device (MindSpore's CPU Conv2D is
    12-60x slower) and 'conv2d' on Ascend and GPU (a real Conv2D node, what their units run)."""
    if conv_impl == "auto":
        return "matmul" if device == "CPU" else "conv2d"
    return conv_impl


def obs_encoder(spec, rng=None, policy_cfg=None, device: str = "CPU"):
    """(encoder cell or None, features width) for the observation space: None for a Box (the
    network sees the normalized row as before), OneHot for a Discrete observation, DictEncoder
    for a Dict (each key's encoder, concatenated in the sorted key order of SpaceSpec.obs_parts),
    ImageEncoder (preprocessing + CNN, weights from ``rng``) for an image."""
    if spec.obs_kind == "Image":
        pc = policy_cfg
        enc = ImageEncoder(rng, spec, pc.cnn, pc.grayscale, pc.resize, pc.ortho_init, conv_impl_for(pc.conv_impl, device))
        return enc, enc.out_dim
    if spec.obs_kind == "Discrete":
        return OneHot(spec.obs_n), spec.obs_n
    if spec.obs_kind == "Dict":
        enc = DictEncoder(spec.obs_parts)
        return enc, enc.out_dim
    return None, spec.obs_dim


def with_encoder(encoder: Optional[nn.Cell], net: nn.Cell) -> nn.Cell:
    """``net`` behind the observation encoder (the same encoder object for every network that
    sees observations); ``net`` itself for a Box observation (parameter names unchanged)."""
    return net if encoder is None else Chain(encoder, net)


# ---------------------------------------------------------------------------------------
# Action heads: the post-processing that turns network output into the environment action
# ---------------------------------------------------------------------------------------
class ArgmaxHead(nn.Cell):
    """argmax over the logits, cast to int32 inside the cell: MindSpore's ONNX writer emits an
    argmax output as an int32 Cast behind an int64-declared output, which ONNX Runtime
    refuses to load; an explicit int32 cast gives a graph it loads."""

    def construct(self, logits):
        return ops.cast(ops.argmax(logits, -1), ms.int32)


class ModeHead(nn.Cell):
    """The mode of a per-dimension discrete distribution (distributions.MultiCategorical: argmax
    of each logit segment; Bernoulli: logit > 0), int32 of shape (B, dims)."""

    def __init__(self, dist: nn.Cell):
        super().__init__()
        self.dist = dist

    def construct(self, logits):
        return self.dist.mode(logits)


class ClipHead(nn.Cell):
    """Clip to the Box bounds (PPO's Gaussian mean)."""

    def __init__(self, low: np.ndarray, high: np.ndarray):
        super().__init__()
        self.low = Tensor(np.asarray(low, np.float32))
        self.high = Tensor(np.asarray(high, np.float32))

    def construct(self, x):
        return ops.clip_by_value(x, self.low, self.high)


class ScaleToBox(nn.Cell):
    """Normalized action a in [-1, 1] -> ``low + (a + 1) * (high - low) / 2``, clipped: the affine
    part of TanhScaleHead, for the acting cells that also need ``a`` itself (what the replay buffer
    stores), so the env action and the stored action come from one tanh evaluation."""

    def __init__(self, low: np.ndarray, high: np.ndarray):
        super().__init__()
        low = np.asarray(low, np.float32)
        high = np.asarray(high, np.float32)
        self.low = Tensor(low)
        self.high = Tensor(high)
        self.half_range = Tensor(((high - low) / 2.0).astype(np.float32))

    def construct(self, a):
        return ops.clip_by_value(self.low + (a + 1.0) * self.half_range, self.low, self.high)


class TanhScaleHead(nn.Cell):
    """``low + (tanh(u) + 1) * (high - low) / 2``, clipped to [low, high] against rounding."""

    def __init__(self, low: np.ndarray, high: np.ndarray):
        super().__init__()
        self.scale = ScaleToBox(low, high)

    def construct(self, u):
        return self.scale(accurate_tanh(u))


class IdentityHead(nn.Cell):
    """No post-processing. Only for tests that prove `msrl verify` catches a missing head."""

    def construct(self, x):
        return x


class PolicyCell(nn.Cell):
    """The deterministic policy: normalizer -> actor network -> action head, one graph."""

    def __init__(self, normalizer: ObsNormalizer, actor: nn.Cell, head: nn.Cell):
        super().__init__()
        self.normalizer = normalizer
        self.actor = actor
        self.head = head

    def construct(self, obs):
        return self.head(self.actor(self.normalizer(obs)))


class CastIO(nn.Cell):
    """float32 in and out around a cell that computes in float16 (fp16 deployment emulation)."""

    def __init__(self, cell: nn.Cell, discrete: bool):
        super().__init__()
        self.cell = cell
        self.discrete = discrete

    def construct(self, obs):
        out = self.cell(ops.cast(obs, ms.float16))
        if self.discrete:
            return out
        return ops.cast(out, ms.float32)


class Fp16Matmul(nn.Cell):
    """A Dense layer computing in float16 between float32 activations: emulates Ascend's
    allow_fp32_to_fp16 / Lite's preferred_fp32 (matrix ops in fp16, vector ops kept fp32)."""

    def __init__(self, dense: nn.Dense):
        super().__init__()
        self.dense = dense.to_float(ms.float16)

    def construct(self, x):
        return ops.cast(self.dense(ops.cast(x, ms.float16)), ms.float32)


def fp16_matmuls(cell: nn.Cell) -> nn.Cell:
    """Replace every nn.Dense inside SequentialCells of ``cell`` by Fp16Matmul (in place).
    Build a new PolicyCell afterwards: a compiled graph does not see later changes."""
    for _, sub in list(cell.cells_and_names()):
        if isinstance(sub, nn.SequentialCell):
            for i in range(len(sub)):
                if isinstance(sub[i], nn.Dense):
                    sub[i] = Fp16Matmul(sub[i])
        for name, child in list(sub.name_cells().items()):
            if isinstance(child, nn.Dense) and not isinstance(sub, (nn.SequentialCell, Fp16Matmul)):
                setattr(sub, name, Fp16Matmul(child))
    return cell


def make_head(spec, squash: bool) -> nn.Cell:
    if spec.act_kind in ("MultiDiscrete", "MultiBinary"):
        from .distributions import multi_distribution
        return ModeHead(multi_distribution(spec))
    if spec.discrete:
        return ArgmaxHead()
    if squash:
        return TanhScaleHead(spec.act_low, spec.act_high)
    return ClipHead(spec.act_low, spec.act_high)


def named_parameters(cell: nn.Cell) -> dict:
    """{full name: Parameter} of a cell, each Parameter once."""
    return {name: p for name, p in cell.parameters_and_names()}


def load_agent_parameters(agent: nn.Cell, tensors: dict, source: str) -> None:
    """Set every parameter of ``agent`` from checkpoint tensors ``agent/<name>``; a missing
    parameter or a shape mismatch raises CheckpointError naming ``source``."""
    from .checkpoint import CheckpointError

    params = named_parameters(agent)
    missing = [k for k in params if f"agent/{k}" not in tensors]
    if missing:
        raise CheckpointError(f"{source}: checkpoint lacks parameters {missing[:5]} "
                              f"(was it written by another algorithm or network config?)")
    for k, p in params.items():
        arr = tensors[f"agent/{k}"]
        if tuple(arr.shape) != tuple(p.shape):
            raise CheckpointError(f"{source}: parameter {k} has shape {arr.shape}, the network expects {tuple(p.shape)}")
        p.set_data(Tensor(arr))


# ---------------------------------------------------------------------------------------
# Agents: every network of an algorithm, built from (config, spaces, Generator). Each
# algorithm defines its agent (algorithms/ppo.py, sac.py, td3.py: ``agent_cls``); the
# training losses and the exported PolicyCell use the same sub-cells.
# ---------------------------------------------------------------------------------------
class Agent(nn.Cell):
    """Base of every agent: ``normalizer``, ``actor`` (network output before the action head),
    ``spec`` and ``squash``; ``policy_cell`` is the deterministic policy cell built from them.
    Subclasses call ``super().__init__(cfg, spec)`` (spec and normalizer), then build their networks."""
    squash = False

    def __init__(self, cfg, spec):
        super().__init__()
        self.spec = spec
        if cfg.env.normalize_obs and (spec.obs_kind == "Image" or spec.column_n.any()):
            from .config import ConfigError
            raise ConfigError(f"key 'env.normalize_obs' is true, but the observation space ({spec.obs_kind}) holds "
                              f"Discrete indices or image pixels (encoded inside the policy cell); observation "
                              f"normalization applies to Box observations: set env.normalize_obs: false")
        self.normalizer = ObsNormalizer(spec.obs_dim, cfg.env.normalize_obs, cfg.env.normalize_obs_clip)

    def policy_cell(self, head: Optional[nn.Cell] = None) -> PolicyCell:
        return PolicyCell(self.normalizer, self.actor, head or make_head(self.spec, self.squash))


# ---------------------------------------------------------------------------------------
# Building blocks of the off-policy agents (SAC, TD3). Conventions shared by both:
#
# * Box actions only (a Discrete space is a ConfigError naming the space).
# * ``actor`` outputs the pre-tanh action ``u``; ``policy_cell()`` appends TanhScaleHead
#   (``squash = True``), so the exported deterministic action is
#   ``low + (tanh(u) + 1) / 2 * (high - low)``, clipped.
# * The critics see ``concat(normalized obs, normalized action)`` where the normalized
#   action is ``tanh(u)`` in [-1, 1] (not the Box units), as Stable-Baselines3 stores and
#   feeds ``scale_action(a)``: the critics' inputs do not depend on the Box bounds, and the
#   replay buffer stores normalized actions.
# * Target networks are non-trainable Parameters (requires_grad=False), copied from the
#   online networks at construction; the Polyak update runs inside the training graph.
# * SB3 / the papers use PyTorch's default (uniform) initialization for SAC and TD3: the
#   configs set ``policy.ortho_init: false`` and ``policy.activation: relu`` accordingly.
# ---------------------------------------------------------------------------------------
def require_box(spec, algorithm: str) -> None:
    from .config import ConfigError
    if spec.discrete:
        raise ConfigError(f"{algorithm} needs a Box (continuous) action space; the environment has "
                          f"{spec.act_kind}({spec.n_actions if spec.act_kind != 'MultiDiscrete' else list(spec.nvec)}) actions "
                          f"(use ppo for discrete actions)")
    if spec.obs_kind != "Box":
        raise ConfigError(f"{algorithm} needs Box observations; the environment has {spec.obs_kind} "
                          f"observations (use ppo, which encodes them inside the policy cell)")


class QNetwork(nn.Cell):
    """Q(s, a) = MLP(concat(normalized obs, normalized action)) -> shape (batch,)."""

    def __init__(self, rng, obs_dim: int, act_dim: int, hidden: Sequence[int], activation: str, ortho: bool):
        super().__init__()
        self.net = MLP(rng, obs_dim + act_dim, hidden, activation, 1, 1.0, ortho)

    def construct(self, x, a):
        return self.net(ops.concat((x, a), -1)).squeeze(-1)


def frozen_copy(make, source: nn.Cell) -> nn.Cell:
    """A target network: ``make(throwaway_rng)`` built with the same shapes, its Parameters
    set to copies of ``source``'s and marked non-trainable (requires_grad=False)."""
    target = make(np.random.default_rng(0))  # weights overwritten below; keeps the run's stream untouched
    src = list(source.get_parameters())
    dst = list(target.get_parameters())
    assert len(src) == len(dst)
    for s, d in zip(src, dst):
        assert tuple(s.shape) == tuple(d.shape)
        d.set_data(Tensor(s.asnumpy().copy()))
        d.requires_grad = False
    return target
