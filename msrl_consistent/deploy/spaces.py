"""The observation and action spaces of a policy: one type for training (built from the gymnasium
spaces by ``envs.space_spec``), for the exporter (``to_json``: the manifest's ``spaces``) and for
the deployed policy (``from_json`` of a validated manifest)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .fields import PIXEL_VALUES, column_n, image_layout, row_order
from .frames import FrameStack, MaxAndSkip


@dataclass(frozen=True)
class SpaceSpec:
    """What the policy cell and the exporter need to know about the spaces.

    Observations reach the policy cell as one float32 row of ``obs_dim`` values per observation:
    a Box flattened; a Discrete observation as its index (one value, one-hot inside the cell).
    Actions: ``discrete`` means integer actions compared exactly (Discrete, MultiDiscrete,
    MultiBinary); ``act_kind`` names the space. ``n_actions`` is the number of choices of a
    Discrete space and the action width of the others; ``nvec`` the choices per dimension of
    MultiDiscrete (2 per dimension for MultiBinary)."""
    obs_shape: Tuple[int, ...]
    obs_low: np.ndarray
    obs_high: np.ndarray
    discrete: bool
    n_actions: int          # Discrete: number of actions; Box/MultiDiscrete/MultiBinary: action width
    act_low: Optional[np.ndarray] = None
    act_high: Optional[np.ndarray] = None
    obs_kind: str = "Box"   # Box | Discrete | Dict | Image
    obs_n: int = 0          # Discrete observations: the number of values
    act_kind: str = ""      # Discrete | Box | MultiDiscrete | MultiBinary ("" : Discrete or Box from `discrete`)
    nvec: Tuple[int, ...] = ()
    obs_parts: Tuple[Tuple[str, str, int, Tuple[int, ...]], ...] = ()
    """Dict observations: (key, "Box" | "Discrete" | "Image", n, shape) per key, in the order in
    which the row concatenates them (:func:`~.fields.row_order`: image keys first, then the
    others, each group sorted; a Box key flattened, a Discrete key as its index, an image key's
    uint8 pixels as float32 values 0..255, ``n`` 256)."""
    image_layout: str = ""  # Image observations: "HWC" (channels last) or "CHW" (channels first)
    frame_stack: int = 1    # k observations per row, oldest first (frames.FrameStack)
    max_and_skip: int = 1   # image envs: each action repeated k times, max of the last two frames (frames.MaxAndSkip)

    @property
    def image_parts(self) -> Tuple[Tuple[str, str, int, Tuple[int, ...]], ...]:
        """A Dict's image keys (row order); empty for every other space."""
        return tuple(p for p in self.obs_parts if p[1] == "Image")

    @property
    def frame_dim(self) -> int:
        """Values of one observation (one frame) in the row."""
        return int(np.prod(self.obs_shape))

    @property
    def image_hwc(self) -> Tuple[int, int, int]:
        """(height, width, channels) of an image observation."""
        s = tuple(self.obs_shape)
        if len(s) == 2:
            return (s[0], s[1], 1)
        return (s[0], s[1], s[2]) if self.image_layout == "HWC" else (s[1], s[2], s[0])

    @property
    def input_dtype(self) -> str:
        """dtype of the policy cell's input: uint8 for images (the raw frame), else float32."""
        return "uint8" if self.obs_kind == "Image" else "float32"

    def __post_init__(self):
        if not self.act_kind:
            object.__setattr__(self, "act_kind", "Discrete" if self.discrete else "Box")

    @property
    def obs_dim(self) -> int:
        """Width of the policy cell's input row: k stacked observations."""
        return int(np.prod(self.obs_shape)) * self.frame_stack

    @property
    def column_n(self) -> np.ndarray:
        """Per column of the observation row: n of the Discrete space it holds the index of, 0 for Box
        (:func:`~.fields.column_n`)."""
        return column_n(self.obs_n if self.obs_kind == "Discrete" else 0, self.obs_parts, self.obs_dim)

    @property
    def action_shape(self) -> Tuple[int, ...]:
        """The shape of one environment action: () for Discrete, (n_actions,) otherwise."""
        return () if self.act_kind == "Discrete" else (self.n_actions,)

    @property
    def logits_dim(self) -> int:
        """Width of the actor's output: logits of every choice (MultiDiscrete: sum(nvec))."""
        return int(sum(self.nvec)) if self.act_kind == "MultiDiscrete" else self.n_actions

    def to_json(self) -> dict:
        o: Dict[str, Any] = {"type": "Box", "shape": list(self.obs_shape), "dtype": "float32",
             "low": _jsonable(self.obs_low), "high": _jsonable(self.obs_high)}
        if self.obs_kind == "Discrete":
            o["type"], o["n"] = "Discrete", self.obs_n
        if self.obs_kind == "Image":
            o.update({"type": "Image", "dtype": "uint8", "layout": self.image_layout, "low": 0, "high": 255})
        else:
            d_ = self.frame_dim
            o["low"], o["high"] = _jsonable(self.obs_low[:d_]), _jsonable(self.obs_high[:d_])
        if self.frame_stack > 1:
            o["frame_stack"] = FrameStack(self.frame_stack, self.frame_dim).spec()
        if self.max_and_skip > 1:
            o["max_and_skip"] = MaxAndSkip(self.max_and_skip).spec()
        if self.obs_kind == "Dict":
            o["type"] = "Dict"
            o["keys"] = sorted(k for k, _, _, _ in self.obs_parts)  # the row order: obs_parts
            o["spaces"] = {k: _part_json(kind, n, shape) for k, kind, n, shape in self.obs_parts}
        d: Dict[str, Any] = {"observation": o}
        if self.act_kind == "Discrete":
            d["action"] = {"type": "Discrete", "n": self.n_actions, "dtype": "int32"}
        elif self.act_kind == "MultiDiscrete":
            d["action"] = {"type": "MultiDiscrete", "nvec": list(self.nvec), "shape": [self.n_actions],
                           "dtype": "int32"}
        elif self.act_kind == "MultiBinary":
            d["action"] = {"type": "MultiBinary", "n": self.n_actions, "shape": [self.n_actions], "dtype": "int32"}
        else:
            d["action"] = {"type": "Box", "shape": [self.n_actions], "dtype": "float32",
                           "low": _jsonable(np.asarray(self.act_low)), "high": _jsonable(np.asarray(self.act_high))}
        return d

    @staticmethod
    def from_json(d: dict) -> "SpaceSpec":
        o, a = d["observation"], d["action"]
        k = int(o.get("frame_stack", {}).get("k", 1))
        if o["type"] == "Image":
            size = int(np.prod(o["shape"])) * k
            obs_low, obs_high = np.zeros(size, np.float32), np.full(size, 255.0, np.float32)
        else:
            obs_low = np.tile(np.asarray(_unjson(o["low"]), dtype=np.float32), k)
            obs_high = np.tile(np.asarray(_unjson(o["high"]), dtype=np.float32), k)
        parts = tuple(row_order((k, o["spaces"][k]["type"], _part_n(o["spaces"][k]),
                                 tuple(o["spaces"][k].get("shape", [1]))) for k in o.get("keys", [])))
        ob = dict(obs_kind=o["type"], obs_n=int(o.get("n", 0)), obs_parts=parts, frame_stack=k,
                  image_layout=o.get("layout", ""), max_and_skip=int(o.get("max_and_skip", {}).get("skip", 1)))
        if a["type"] == "Discrete":
            return SpaceSpec(tuple(o["shape"]), obs_low, obs_high, True, int(a["n"]), **ob)
        if a["type"] == "MultiDiscrete":
            return SpaceSpec(tuple(o["shape"]), obs_low, obs_high, True, len(a["nvec"]), act_kind="MultiDiscrete",
                             nvec=tuple(int(v) for v in a["nvec"]), **ob)
        if a["type"] == "MultiBinary":
            return SpaceSpec(tuple(o["shape"]), obs_low, obs_high, True, int(a["n"]), act_kind="MultiBinary",
                             nvec=(2,) * int(a["n"]), **ob)
        return SpaceSpec(tuple(o["shape"]), obs_low, obs_high, False, int(a["shape"][0]),
                         np.asarray(_unjson(a["low"]), np.float32), np.asarray(_unjson(a["high"]), np.float32), **ob)

    def sample_obs(self, rng: np.random.Generator, low: np.ndarray, high: np.ndarray, n: int) -> np.ndarray:
        """``n`` observations drawn uniformly inside [low, high] (finite bounds), as the cell takes
        them: float32 rows; Discrete observations are integer indices."""
        if self.obs_kind == "Discrete":
            return rng.integers(0, self.obs_n, (n, 1)).astype(np.float32)
        if self.obs_kind == "Image":
            return rng.integers(0, 256, (n, self.obs_dim)).astype(np.uint8)
        if self.obs_kind == "Dict":
            cols = self.column_n
            x = rng.uniform(low, high, (n, self.obs_dim))
            idx = np.floor(rng.random((n, self.obs_dim)) * np.maximum(cols, 1))
            return np.where(cols > 0, idx, x).astype(np.float32)
        return rng.uniform(low, high, (n, self.obs_dim)).astype(np.float32)


def _part_n(sub: dict) -> int:
    """A Dict key's ``n`` in obs_parts: a Discrete key's choices, an image key's PIXEL_VALUES, 0 for a Box."""
    return {"Discrete": int(sub.get("n", 0)), "Image": PIXEL_VALUES}.get(sub["type"], 0)


def _part_json(kind: str, n: int, shape) -> dict:
    """One Dict key's space in the manifest."""
    if kind == "Discrete":
        return {"type": "Discrete", "n": n}
    if kind == "Image":
        return {"type": "Image", "shape": list(shape), "layout": image_layout(shape), "dtype": "uint8"}
    return {"type": "Box", "shape": list(shape)}


def _jsonable(arr: np.ndarray) -> list:
    # JSON has no infinity: store +-inf as strings.
    return [("inf" if v > 0 else "-inf") if np.isinf(v) else float(v) for v in np.asarray(arr, np.float64).ravel()]


def _unjson(values: list) -> list:
    return [float(v) for v in values]
