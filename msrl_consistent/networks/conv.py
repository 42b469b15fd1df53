"""Convolutions as MindSpore 2.10's CPU runs them fastest with the parameters and gradients of
nn.Conv2d: space-to-depth blocks, their windows as one Gather, one MatMul (MatMulConv2d), and the
constant-index crops they need; ImageEncoder's trunk is built from :func:`conv`."""
from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from .mlp import orthogonal


class Crop(nn.Cell):
    """``x[:, b1:b1+n1, b2:b2+n2, b3:b3+n3]`` of a 4-D tensor (any batch size) as Gathers with constant
    indices: one Gather over the merged dims 1 and 2 when dim 3 is kept whole (an NHWC layer's
    unused rows and columns, each index copying a contiguous row), else one Gather per cropped
    dim. Not tensor indexing: MindSpore 2.10's CPU StridedSlice is far slower than a Gather;
    not ops.slice: it needs the batch size, and -1 there exports to an ONNX Slice that drops the
    last row. Backward: ``dout`` zero-padded back to the input shape (Concats with zeros). Only training
    depends on the backward; the exported graph holds the Gathers (ONNX Gather)."""

    def __init__(self, begin, size, full):
        super().__init__()
        b, n, f = [int(v) for v in begin], [int(v) for v in size], [int(v) for v in full]
        self.zero_pads = crop_pads(b, n, f)
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
        return (zero_pad(dout, self.zero_pads),)


def crop_pads(begin, size, full) -> tuple:
    """The (dim, before, after) zero blocks that pad a crop of dims 1-3 back to ``full`` (its
    backward): Concats with zero blocks, the same values as ops.pad, whose CPU PadV3 kernel is an
    order of magnitude slower."""
    return tuple((d, begin[d], full[d] - begin[d] - size[d]) for d in (1, 2, 3) if size[d] != full[d])


def zero_pad(g, pads):
    """``g`` zero-padded by ``pads`` ((dim, before, after), ...): Concats with zero blocks."""
    for d, before, after in pads:
        shape = g.shape
        if before:
            g = ops.concat((ops.zeros(shape[:d] + (before,) + shape[d + 1:], g.dtype), g), d)
        if after:
            g = ops.concat((g, ops.zeros(shape[:d] + (after,) + shape[d + 1:], g.dtype)), d)
    return g


class Windows(nn.Cell):
    """im2col over blocks: (B, hb, wb, F) -> (B, oh, ow, m*m*F), each output position's m x m
    block windows side by side, window (a, b) in row-major order. Forward: one Gather of whole
    blocks (the Crops-and-Concat form costs a Gather per window and the Concat's copy). Backward:
    each window's slice of ``dout`` zero-padded back to the blocks (Crop's backward) and the m*m
    summed in window order (AddN): the kernels and order autodiff runs for the Crops and the
    Concat, so the gradients keep their bits (tested)."""

    def __init__(self, m: int, oh: int, ow: int, hb: int, wb: int, f: int):
        super().__init__()
        rows = [(i + a) * wb + (j + b) for i in range(oh) for j in range(ow) for a in range(m) for b in range(m)]
        self.rows = Tensor(np.asarray(rows, np.int32))
        self.merged, self.out_shape, self.f = (-1, hb * wb, f), (-1, oh, ow, m * m * f), f
        self.pads = [crop_pads((0, a, b, 0), (0, oh, ow, f), (0, hb, wb, f)) for a in range(m) for b in range(m)]

    def construct(self, x):
        return ops.gather(x.reshape(self.merged), self.rows, 1).reshape(self.out_shape)

    def bprop(self, x, out, dout):
        parts = ops.split(dout, self.f, -1)
        return (ops.addn([zero_pad(p, pads) for p, pads in zip(parts, self.pads)]),)


class BiasAdd(nn.Cell):
    """``x (N, C) + b (C,)`` as one BiasAdd kernel (faster than the broadcast Add on MindSpore's CPU
    backend: docs/benchmarks.md) with the broadcast Add's gradient (``dout``, and its ReduceSum over
    N, the kernel autodiff runs for the Add), so the gradients keep their bits."""

    def __init__(self):
        super().__init__()
        self.add = ops.BiasAdd()
        self.sum = ops.ReduceSum()

    def construct(self, x, b):
        return self.add(x, b)

    def bprop(self, x, b, out, dout):
        return dout, self.sum(dout, 0)


class MatMulConv2d(nn.Cell):
    """A 'valid' convolution whose kernel size is a multiple of its stride, as Reshape / Transpose /
    Gather, one MatMul and a BiasAdd: what NatureCNN's 8x8/4, 4x4/2 and 3x3/1 layers (and the
    'small' trunk's 4x4/4, 2x2/2) compute, many times faster than MindSpore 2.10's CPU Conv2D
    (figures: docs/benchmarks.md, from benchmarks/cnn_step_cost.py), equal to it within float32
    rounding.

    Space-to-depth by the stride s turns the input into (B, H/s, W/s, C*s*s) blocks; the conv is
    then an m x m, stride-1 conv over blocks (m = kernel / s), i.e. the m*m shifted block windows
    side by side (im2col, one Gather: Windows; unused rows and columns dropped first: Crop) times the
    weight as a matrix. The parameters are
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
        self.windows = None if m == 1 else Windows(m, oh, ow, hb, wb, c_in * s * s)
        # weight (out, in, [a, sh], [b, sw]) -> rows ordered (a, b, in, sh, sw), as the windows' features
        self.w_blocks = (c_out, c_in, m, s, m, s)
        self.cols = m * m * c_in * s * s
        self.c_out = c_out
        self.out_shape = (-1, oh, ow, c_out)
        self.matmul = ops.MatMul()  # its gradient uses MatMul's transpose flags, no Transpose kernels
        self.bias_add = BiasAdd()

    def to_blocks(self, x):
        """The layer's input -> its space-to-depth blocks (B, hb, wb, C*s*s): a Transpose, pure data
        movement. PPO's rollout buffer stores the first layer's, flattened (ImageEncoder.stored), so
        its update does not transpose the same frames again at every epoch."""
        if self.crop is not None:
            x = self.crop(x)
        return ops.transpose(x.reshape(self.blocks), self.perm).reshape(self.flat_blocks)

    def construct(self, x):
        """``x``: the layer's input (4-D), or its blocks flattened, one row per sample (2-D)."""
        x = x.reshape(self.flat_blocks) if x.ndim == 2 else self.to_blocks(x)
        if self.windows is not None:
            x = self.windows(x)
        w = ops.transpose(self.weight.reshape(self.w_blocks), (2, 4, 1, 3, 5, 0)).reshape((self.cols, self.c_out))
        y = self.bias_add(self.matmul(x.reshape((-1, self.cols)), w), self.bias)
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
