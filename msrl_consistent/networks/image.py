"""Image observations: the whole preprocessing inside the cell (cast, grayscale, area resize),
then a convolutional trunk, so the exported graph consumes the raw uint8 frame."""
from __future__ import annotations

from typing import List

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from .conv import conv
from .mlp import dense

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


CNN_LAYERS = {
    # (out channels, kernel, stride) per conv layer, then the features width
    "nature": (((32, 8, 4), (64, 4, 2), (64, 3, 1)), 512),   # Mnih et al. 2015, SB3's NatureCNN
    # images smaller than 64x64: non-overlapping (kernel = stride) convs, ~150k multiply-adds for a
    # 32x32 frame (NatureCNN-like 3x3/2 layers cost an order of magnitude more: too slow to train on a CPU)
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
        from ..config import ConfigError
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
            self.row_axis = 2
            self.pixels = (-1, c)  # grayscale as one (pixels, 3) x (3, 1) MatMul: faster than Mul + ReduceSum on CPU
            self.gray = Tensor(np.asarray(GRAY_WEIGHTS, np.float32).reshape(3, 1))
        else:
            self.row_axis = 3
            self.gray = Tensor(np.asarray(GRAY_WEIGHTS, np.float32).reshape(1, 1, 3, 1, 1))
        if self.grayscale:  # gray first: the rest works on a third of the values
            self.row_axis = 2
        self.rows_2d = (-1, w)
        self.matmul = ops.MatMul()  # grayscale (channels last) and the column resize

        def shapes(n: int) -> tuple:
            """The reshapes of ``preprocess`` for rows of n frames: (input, channels last after the
            row resize, gray, stacked, output)."""
            inp = (-1, n, h, w * c) if self.channels_last else (-1, n, c, h, w)
            return inp, (-1, n, oh, w, c), (-1, n, h, w), (-1, n * c_out, oh, w), (-1, n * c_out, oh, ow)

        self.shapes = shapes(k)  # a stacked row: k frames, oldest first
        self.frame_shapes = shapes(1)  # one frame (preprocess_frame)
        self.out_shape = self.shapes[4]
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
        self.preprocessed_dim = k * c_out * oh * ow  # width of one preprocessed row
        # width of the rows PPO's rollout buffer stores (``stored``): the first conv's blocks
        self.stored_dim = int(np.prod(convs[0].flat_blocks[1:])) if self.nhwc_out else self.preprocessed_dim
        self.frames = k

    def preprocess(self, x):
        """Raw rows -> (B, k * channels, height, width) float32 in [0, 1], resized: what the convs see.

        Cast to float32; grayscale (luma weights over the channel axis; one MatMul for
        channels-last frames); area resize of the rows (each output row the weighted sum of the
        <= 3 input rows it covers: Gathers of whole rows, exact per element); area resize of the
        columns (one MatMul with a constant (W, W') matrix); /255 last, on the smallest tensor.
        Without grayscale, channels-last frames are turned channels-first after the row resize.
        No gradient flows into it (it has no parameters). The MatMuls' constants are cast to the
        frames' dtype (a no-op in float32): a cell emulating float16 holds them in float16."""
        return self._preprocess(x, self.shapes)

    def preprocess_frame(self, x):
        """One raw frame per row (B, H * W * C) -> (B, channels, height, width): ``preprocess`` of
        a one-frame stack. Every op treats the frames of a stack apart, so this is, bit for bit, the
        slice of a stack's ``preprocess`` that the frame gives (tested): a rollout that keeps the
        k - 1 earlier preprocessed frames preprocesses only the newest."""
        return self._preprocess(x, self.frame_shapes)

    def _preprocess(self, x, shapes):
        in_shape, hwc, gray_shape, stacked, out_shape = shapes
        x = ops.cast(x, ms.float32).reshape(in_shape)
        if self.grayscale:
            if self.channels_last:
                x = self.matmul(x.reshape(self.pixels), ops.cast(self.gray, x.dtype))
            else:
                x = (x * self.gray).sum(2)
            x = x.reshape(gray_shape)
        if self.resize:
            acc = ops.gather(x, self.row_idx[0], self.row_axis) * self.row_w[0]
            for i in range(1, len(self.row_idx)):
                acc = acc + ops.gather(x, self.row_idx[i], self.row_axis) * self.row_w[i]
            x = acc
        if self.channels_last and not self.grayscale:
            x = ops.transpose(x.reshape(hwc), (0, 1, 4, 2, 3))
        x = x.reshape(stacked)
        if self.resize:
            x = self.matmul(x.reshape(self.rows_2d), ops.cast(self.rw_t, x.dtype)).reshape(out_shape)
        return ops.stop_gradient(x / 255.0)

    def construct(self, x):
        return self.trunk(self.preprocess(x))

    def stored(self, x):
        """Preprocessed frames (``preprocess``'s output) -> the rows PPO's rollout buffer stores,
        (B, stored_dim): the first MatMulConv2d's blocks (its Transpose done once per frame row
        rather than at every epoch of the update), or the frames flattened (conv2d)."""
        x = x.reshape(self.out_shape)
        if self.nhwc_out:
            x = self.convs[0].to_blocks(x)
        return x.reshape((-1, self.stored_dim))

    def trunk(self, x):
        """Preprocessed frames (``preprocess``'s output, 4-D) or ``stored`` rows (2-D) -> features:
        the convs, flatten, Dense, ReLU. PPO's update phase starts here, from the rows its rollout
        cell stored, so no frame is preprocessed twice. Either input gives the same bits (the blocks
        are the frames moved, not computed)."""
        if not (self.nhwc_out and x.ndim == 2):
            x = x.reshape(self.out_shape)
        x = self.convs(x)
        if self.nhwc_out:
            x = ops.transpose(x, (0, 3, 1, 2))  # Conv2d's (C, H, W) flatten order for the Dense
        return self.fc(x.reshape((-1, self.n_flat)))  # -1, not x.shape[0]: a dynamic batch in ONNX


class _Preprocess(nn.Cell):
    def __init__(self, encoder: ImageEncoder, one_frame: bool):
        super().__init__()
        self.encoder, self.one_frame = encoder, one_frame

    def construct(self, x):
        return self.encoder.preprocess_frame(x) if self.one_frame else self.encoder.preprocess(x)


def frame_wise_exact(encoder: ImageEncoder, batches) -> bool:
    """Whether, compiled as a rollout graph compiles it, each frame preprocessed alone
    (``preprocess_frame``) has the bits it has inside its stack (``preprocess``) at each batch size
    of ``batches``, on random frames (a fixed seed; zero frames included). The ops treat frames
    apart, but a MatMul's CPU kernel picks its blocking by the row count: the gray MatMul over
    one frame's pixels can round differently from the stack's at some sizes (measured: 512-768
    pixels per row). Only then may a rollout keep preprocessed frames (PPO's FrameWiseRollout)."""
    rng = np.random.default_rng(0)
    k = encoder.frames
    whole, alone = _Preprocess(encoder, False), _Preprocess(encoder, True)
    d = int(np.prod(encoder.frame_shapes[0][2:]))  # raw values per frame
    for b in sorted(set(int(b) for b in batches)):
        rows = rng.integers(0, 256, (b, k * d)).astype(np.uint8)
        rows[0, :d] = 0
        stacked = whole(Tensor(rows)).asnumpy().reshape(b, k, -1)
        for i in range(k):
            one = alone(Tensor(rows[:, i * d:(i + 1) * d].copy())).asnumpy().reshape(b, -1)
            if not np.array_equal(one, stacked[:, i]):
                return False
    return True
