"""The inputs of an exported graph, in order: the observation input(s), then a recurrent graph's
state (recurrent.STATE_INPUTS).

A policy's observation reaches its training cell as one packed row (SpaceSpec.obs_parts). Most
graphs take that row as their one observation input, ``obs``. A Dict observation with image keys
(several sensors) is exported with one input per key kind instead: each image key's raw uint8
frames as ``obs_<key>`` (batch, *its shape), then the other keys' values as one float32 row
``obs`` (absent when every key is an image). The packed row holds the image keys first
(fields.row_order), so each input is one column range of it: :func:`split_rows` cuts a packed
row into the graph's inputs on the deploying side, and the graph's first ops join them back
(networks.packing.PackedInputs: Cast, Reshape, Concat, all exact) before the training cell.
NumPy only, as the rest of the deploy package.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .errors import ExportError
from .fields import _Fields, _short, _width
from .names import MANIFEST

OBS_INPUT = "obs"
"""The name of the float32 observation row (and of the one input of a single-input graph)."""
IMAGE_PREFIX = "obs_"
"""An image key's input is this prefix + the key."""


@dataclass(frozen=True)
class ObsInput:
    """One observation input of the graph: its ``name``, the Dict ``keys`` it carries (empty for a
    non-Dict space), its ``shape`` per row, ``dtype`` and the packed row's columns [start, stop)."""
    name: str
    keys: Tuple[str, ...]
    shape: Tuple[int, ...]
    dtype: str
    start: int
    stop: int


GraphInput = Tuple[str, Tuple[int, ...], str]
"""(name, shape without the batch axis, dtype) of one graph input."""


def obs_inputs(spec) -> List[ObsInput]:
    """The graph's observation inputs for a SpaceSpec (or an Export: ``obs_parts``, ``obs_dim``,
    ``input_dtype``)."""
    parts = list(spec.obs_parts or ())
    if not any(p[1] == "Image" for p in parts):
        return [ObsInput(OBS_INPUT, tuple(p[0] for p in parts), (int(spec.obs_dim),), spec.input_dtype, 0,
                         int(spec.obs_dim))]
    out, col, rest = [], 0, []
    for key, kind, n, shape in parts:
        w = _width((key, kind, n, shape))
        if kind == "Image":
            out.append(ObsInput(IMAGE_PREFIX + key, (key,), tuple(int(s) for s in shape), "uint8", col, col + w))
        else:
            rest.append((key, col, col + w))
        col += w
    if rest:
        out.append(ObsInput(OBS_INPUT, tuple(k for k, _, _ in rest), (rest[-1][2] - rest[0][1],), "float32",
                            rest[0][1], rest[-1][2]))
    return out


def multi_input(inputs: Sequence[ObsInput]) -> bool:
    """Whether the graph takes more than the packed row (a Dict with image keys)."""
    return any(i.name != OBS_INPUT for i in inputs)


def graph_inputs(inputs: Sequence[ObsInput], state_size: int = 0) -> List[GraphInput]:
    """Every input of the graph in order: the observation inputs, then h, c (state_size,) and
    episode_start () of a recurrent graph."""
    out: List[GraphInput] = [(i.name, i.shape, i.dtype) for i in inputs]
    if state_size:
        out += [("h", (int(state_size),), "float32"), ("c", (int(state_size),), "float32"), ("episode_start", (), "float32")]
    return out


def split_rows(inputs: Sequence[ObsInput], x: np.ndarray) -> List[np.ndarray]:
    """Packed rows (B, obs_dim) -> the graph's observation inputs (a single-input graph: ``[x]``).
    Image columns hold integers 0..255 (validated before), so their uint8 cast is exact."""
    if len(inputs) == 1 and inputs[0].start == 0 and inputs[0].stop == x.shape[1]:
        return [x]
    b = x.shape[0]
    return [np.ascontiguousarray(x[:, i.start:i.stop], i.dtype).reshape((b,) + i.shape) for i in inputs]


def zero_inputs(b: int, inputs: Sequence[GraphInput]) -> List[np.ndarray]:
    """A graph's inputs at batch ``b``, zeros, except episode_start 1 (the first step of an episode)."""
    return [np.ones(b, np.float32) if name == "episode_start" else np.zeros((b,) + tuple(shape), dtype)
            for name, shape, dtype in inputs]


def inputs_io(inputs: Sequence[ObsInput], batch: Optional[int]) -> list:
    """The manifest's ``io.inputs`` of a multi-input graph (``batch`` None: dynamic)."""
    return [{"name": i.name, "keys": list(i.keys), "shape": [batch, *i.shape], "dtype": i.dtype} for i in inputs]


def read_inputs_io(f: _Fields, inputs: Sequence[ObsInput], batch: Optional[int]) -> None:
    """``io.inputs`` of a multi-input export is exactly :func:`inputs_io` of the observation space."""
    got, want = f.get("io.inputs", "list"), inputs_io(inputs, batch)
    if got != want:
        raise ExportError(f"{MANIFEST}: field 'io.inputs' is {_short(got)}, but the observation space and export "
                          f"batch give {_short(want)} (the image keys' uint8 frames, then the other keys' float32 row)")
