"""The validating reader of an export directory: manifest.json parsed section by section,
file names kept inside the directory, sha256 of every file."""
from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .errors import ExportError, _one_line
from .fields import _bounds, _dict_parts, _Fields, _is_int, _short, _width, check_schema, plain_name
from .formats import FORMAT_FILE
from .frames import FIRE_RESET_ACTIONS, FrameStack, MaxAndSkip
from .golden import read_golden, read_golden_arrays
from .graph_io import graph_inputs, multi_input, obs_inputs, read_inputs_io
from .names import MANIFEST, MAX_BATCH, MAX_DIM, MAX_FILES, MAX_GOLDEN, MAX_MANIFEST_BYTES, MAX_ROW_BYTES, SCHEMA_VERSION, memory_bytes
from .recurrent import read_state_io
from .sampling import GOLDEN_PREFIX, read_distribution_io
from .spaces import SpaceSpec


class Export:
    """A validated export directory (see :func:`open_export`)."""

    def __init__(self, directory: str, manifest: dict):
        self.dir = directory
        self.root = os.path.realpath(directory)
        self.manifest = manifest
        f = _Fields(manifest)
        if manifest.get("schema_version") != SCHEMA_VERSION:
            raise ExportError(f"{MANIFEST}: unknown schema_version {_short(manifest.get('schema_version'))} "
                              f"(this reader knows version {SCHEMA_VERSION})")
        check_schema(manifest)
        self.algorithm = f.get("algorithm", "str")
        self.env_id = f.get("env_id", "str")
        _check_observation(f, manifest)
        _check_action(f)
        self.spec = SpaceSpec.from_json(manifest["spaces"])  # the spaces, now known to be well-formed
        self.reset_actions = _reset_actions(manifest)
        self._export(f, manifest)
        self._io(f)
        self._files(f)
        self._golden_info(f)

    @property
    def obs_dim(self) -> int:
        """The model input row's width (the spec's: k stacked observations)."""
        return self.spec.obs_dim

    def _export(self, f: _Fields, manifest: dict) -> None:
        """export: formats, precision, the fixed or dynamic batch, the golden batch, ONNX batch."""
        formats = f.get("export.formats", "list")
        if not formats or not all(isinstance(x, str) and x in FORMAT_FILE for x in formats) or len(set(formats)) != len(formats):
            raise ExportError(f"{MANIFEST}: field 'export.formats' is {_short(formats)}, expected distinct names of "
                              f"{', '.join(FORMAT_FILE)}")
        self.formats = list(formats)
        self.precision = f.get("export.precision", "str")
        if self.precision not in ("fp32", "fp16"):
            raise ExportError(f"{MANIFEST}: field 'export.precision' is {_short(self.precision)}, expected fp32 or fp16")
        f.get("export", "dict")
        if "batch" not in manifest["export"]:
            raise ExportError(f"{MANIFEST}: missing field 'export.batch'")
        batch = manifest["export"]["batch"]
        if batch == "dynamic":
            self.batch = None
        elif _is_int(batch) and 1 <= batch <= MAX_BATCH:
            self.batch = batch
        else:
            raise ExportError(f"{MANIFEST}: field 'export.batch' is {_short(batch)}, expected 'dynamic' or 1..{MAX_BATCH}")
        self.golden_batch = f.int_in("export.golden_batch", 1, MAX_BATCH)
        if self.batch is not None and self.golden_batch != self.batch:
            raise ExportError(f"{MANIFEST}: 'export.golden_batch' {self.golden_batch} differs from the fixed "
                              f"'export.batch' {self.batch}")
        self.onnx_batch: Any = None
        if "onnx" in self.formats:
            ob = f.get("export.onnx", "dict").get("batch")
            if ob == "dynamic":
                self.onnx_batch = None
            elif _is_int(ob) and ob == self.golden_batch:
                self.onnx_batch = ob
            else:
                raise ExportError(f"{MANIFEST}: field 'export.onnx.batch' is {_short(ob)}, expected 'dynamic' or "
                                  f"the golden batch {self.golden_batch}")

    def _io(self, f: _Fields) -> None:
        """io: the model input and output names, shapes and dtypes, consistent with the spaces (a
        Dict with image keys: ``io.inputs``, one input per key kind, graph_io)."""
        want_b = None if self.batch is None else self.batch
        self.obs_inputs = obs_inputs(self.spec)
        if multi_input(self.obs_inputs):
            read_inputs_io(f, self.obs_inputs, want_b)
        else:
            in_shape = f.get("io.input.shape", "list")
            if in_shape != [want_b, self.obs_dim]:
                raise ExportError(f"{MANIFEST}: field 'io.input.shape' is {_short(in_shape)}, but the observation "
                                  f"space and export batch give {_short([want_b, self.obs_dim])}")
            if f.get("io.input.dtype", "str") != self.spec.input_dtype:
                raise ExportError(f"{MANIFEST}: field 'io.input.dtype' must be {self.spec.input_dtype} for a "
                                  f"{self.spec.obs_kind} observation")
            f.get("io.input.name", "str")
        out_shape = f.get("io.output.shape", "list")
        want_out = [want_b] + ([] if self.spec.act_kind == "Discrete" else [self.spec.n_actions])
        if out_shape != want_out:
            raise ExportError(f"{MANIFEST}: field 'io.output.shape' is {_short(out_shape)}, but the action space "
                              f"and export batch give {_short(want_out)}")
        out_dtype = f.get("io.output.dtype", "str")
        if out_dtype != ("int32" if self.spec.discrete else "float32"):
            raise ExportError(f"{MANIFEST}: field 'io.output.dtype' is {_short(out_dtype)}, but the action space "
                              f"is {self.spec.act_kind}")
        self.state_size = read_state_io(f, want_b)  # a recurrent graph's h and c units (0: none)
        # the action distribution's outputs after the action (deploy.sampling; None: the action only)
        self.distribution = read_distribution_io(f, self.spec, want_b)
        self.graph_inputs = graph_inputs(self.obs_inputs, self.state_size)

    def _files(self, f: _Fields) -> None:
        """files: plain names inside the directory with 64-hex sha256, every exported format listed."""
        files = f.get("files", "dict")
        if len(files) > MAX_FILES:
            raise ExportError(f"{MANIFEST}: field 'files' lists {len(files)} files (at most {MAX_FILES})")
        for name, digest in files.items():
            if not plain_name(name) or name == MANIFEST:
                raise ExportError(f"{MANIFEST}: file name {_short(name)} is not a plain file name inside the "
                                  f"export directory")
            if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
                raise ExportError(f"{MANIFEST}: sha256 of {name} is {_short(digest)}, expected 64 hex digits")
        self.files: Dict[str, str] = dict(files)
        for fmt in self.formats:
            if FORMAT_FILE[fmt] not in self.files:
                raise ExportError(f"{MANIFEST}: export.formats has {fmt} but 'files' does not list {FORMAT_FILE[fmt]}")

    def _golden_info(self, f: _Fields) -> None:
        """golden: the listed golden set, its count and batch, its declared size bounded."""
        self.golden_file = f.get("golden.file", "str")
        if self.golden_file not in self.files:
            raise ExportError(f"{MANIFEST}: the golden set {_short(self.golden_file)} is not listed in 'files'")
        self.golden_count = f.int_in("golden.count", 1, MAX_GOLDEN)
        if f.int_in("golden.batch", 1, MAX_BATCH) != self.golden_batch:
            raise ExportError(f"{MANIFEST}: 'golden.batch' differs from 'export.golden_batch' {self.golden_batch}")
        self.golden_lanes, self.golden_steps = 0, 0
        if self.state_size:  # golden sequences: `lanes` envs stepped together for `steps` steps
            self.golden_lanes = f.int_in("golden.sequences.lanes", 1, MAX_BATCH)
            self.golden_steps = f.int_in("golden.sequences.steps", 1, MAX_GOLDEN)
            if self.golden_lanes != self.golden_batch or self.golden_lanes * self.golden_steps != self.golden_count:
                raise ExportError(f"{MANIFEST}: 'golden.sequences' {self.golden_lanes} lanes x {self.golden_steps} steps "
                                  f"must give 'golden.count' {self.golden_count} at 'golden.batch' {self.golden_batch}")
        spec = self.spec
        row_out = 4 * (1 if spec.act_kind == "Discrete" else spec.n_actions) + 4 * (2 * self.state_size + 1 if self.state_size else 0)
        nbytes = self.golden_count * (spec.obs_dim * np.dtype(spec.input_dtype).itemsize + row_out)
        if nbytes > memory_bytes() // 2:
            raise ExportError(f"{MANIFEST}: the golden set declares {self.golden_count} x {self.obs_dim} values "
                              f"({nbytes} bytes; half of this machine's memory is {memory_bytes() // 2})")

    # -- files --------------------------------------------------------------------------------

    def path(self, name: str) -> str:
        """The path of a listed, present, regular file inside the directory (no link leading out)."""
        if name not in self.files:
            raise ExportError(f"{name}: not listed in {MANIFEST} (exported formats: {', '.join(self.formats)})")
        return _inside(self.dir, self.root, name, f"listed in {MANIFEST} but ")

    def check_hashes(self) -> Dict[str, str]:
        for name, expected in sorted(self.files.items()):
            actual = file_sha256(self.path(name))
            if actual != expected:
                raise ExportError(f"{name}: sha256 {actual} does not match the manifest's {expected} "
                                  f"(the file was modified or corrupted after export)")
        return dict(self.files)

    @property
    def dynamic(self) -> bool:
        return self.batch is None

    def golden(self) -> Tuple[np.ndarray, np.ndarray]:
        """(obs, actions) of golden.npz, checked against the manifest before anything is allocated."""
        return read_golden(self)

    def golden_distribution(self) -> Dict[str, np.ndarray]:
        """The training cell's distribution outputs at the golden observations, by output name."""
        arrays = read_golden_arrays(self)
        return {k[len(GOLDEN_PREFIX):]: v for k, v in arrays.items() if k.startswith(GOLDEN_PREFIX)}

    def golden_sequences(self) -> Dict[str, np.ndarray]:
        """A recurrent export's golden sequences, step-major: obs (steps, lanes, obs_dim), actions,
        episode_starts (steps, lanes) and the training cell's h, c after every step (steps, lanes, hidden)."""
        arrays = read_golden_arrays(self)
        shape = (self.golden_steps, self.golden_lanes)
        return {k: v.reshape(shape + v.shape[1:]) for k, v in arrays.items()}

    # -- golden set ---------------------------------------------------------------------------

def _check_observation(f: _Fields, manifest: dict) -> None:
    """spaces.observation: its type, frame stacking, max-and-skip, layout, shape and bounds are
    well-formed, and one row of it is of bounded size (before the SpaceSpec allocates its bounds)."""
    obs_type = f.get("spaces.observation.type", "str")
    if obs_type not in ("Box", "Discrete", "Dict", "Image"):
        raise ExportError(f"{MANIFEST}: field 'spaces.observation.type' is {_short(obs_type)}, expected Box, "
                          f"Discrete, Dict or Image")
    obs_d = manifest["spaces"].get("observation")
    fs = obs_d.get("frame_stack") if isinstance(obs_d, dict) else None
    frame_stack = 1
    if fs is not None:
        if (not isinstance(fs, dict) or fs.get("kind") != FrameStack.KIND or fs.get("order") != FrameStack.ORDER
                or not _is_int(fs.get("k")) or not 2 <= fs["k"] <= 64 or obs_type not in ("Box", "Image")):
            raise ExportError(f"{MANIFEST}: field 'spaces.observation.frame_stack' is {_short(fs)}, expected "
                              f"{{'kind': 'frame_stack', 'k': 2..64, 'order': 'oldest_first'}} on a Box or Image")
        frame_stack = fs["k"]
    ms_ = obs_d.get("max_and_skip") if isinstance(obs_d, dict) else None
    if ms_ is not None and (not isinstance(ms_, dict) or ms_.get("kind") != MaxAndSkip.KIND
                            or ms_.get("pool") != MaxAndSkip.POOL or not _is_int(ms_.get("skip"))
                            or not 2 <= ms_["skip"] <= 64 or obs_type != "Image"):
        raise ExportError(f"{MANIFEST}: field 'spaces.observation.max_and_skip' is {_short(ms_)}, expected "
                          f"{{'kind': 'max_and_skip', 'skip': 2..64, 'pool': 'max_last_2'}} on an Image")
    if obs_type == "Image":
        layout = f.get("spaces.observation.layout", "str")
        if layout not in ("HWC", "CHW") or f.get("spaces.observation.dtype", "str") != "uint8":
            raise ExportError(f"{MANIFEST}: an Image observation needs 'layout' HWC or CHW and dtype uint8")
    if obs_type == "Discrete":
        f.int_in("spaces.observation.n", 1, MAX_DIM)
    obs_parts = _dict_parts(f) if obs_type == "Dict" else None
    shape = f.get("spaces.observation.shape", "list")
    if obs_parts is not None and shape != [sum(_width(p) for p in obs_parts)]:
        raise ExportError(f"{MANIFEST}: field 'spaces.observation.shape' is {_short(shape)}, but the Dict keys "
                          f"hold {sum(_width(p) for p in obs_parts)} values")
    if obs_type == "Discrete" and shape != [1]:
        raise ExportError(f"{MANIFEST}: field 'spaces.observation.shape' is {_short(shape)}, expected [1] for a "
                          f"Discrete observation (its index)")
    if not shape or len(shape) > 32 or not all(_is_int(s) and 1 <= s <= MAX_DIM for s in shape):
        raise ExportError(f"{MANIFEST}: field 'spaces.observation.shape' is {_short(shape)}, expected 1 to 32 "
                          f"sizes of 1..{MAX_DIM}")
    frame_dim = math.prod(shape)
    row_bytes = frame_dim * frame_stack * (1 if obs_type == "Image" else 4)  # the model's input row: k frames
    if row_bytes > MAX_ROW_BYTES:
        raise ExportError(f"{MANIFEST}: field 'spaces.observation.shape' is {_short(shape)} (x {frame_stack} "
                          f"stacked): one observation row of {row_bytes} bytes, at most {MAX_ROW_BYTES}")
    if obs_type != "Image":
        _bounds(f, "spaces.observation.low", frame_dim, False)
        _bounds(f, "spaces.observation.high", frame_dim, False)


def _check_action(f: _Fields) -> None:
    """spaces.action: Discrete, MultiBinary, MultiDiscrete or Box with its bounds, well-formed."""
    act_kind = f.get("spaces.action.type", "str")
    if act_kind in ("Discrete", "MultiBinary"):
        f.int_in("spaces.action.n", 1, MAX_DIM)
    elif act_kind == "MultiDiscrete":
        nvec = f.get("spaces.action.nvec", "list")
        if not nvec or len(nvec) > MAX_DIM or not all(_is_int(v) and 1 <= v <= MAX_DIM for v in nvec):
            raise ExportError(f"{MANIFEST}: field 'spaces.action.nvec' is {_short(nvec)}, expected 1..{MAX_DIM} "
                              f"positive choice counts")
    elif act_kind == "Box":
        ashape = f.get("spaces.action.shape", "list")
        if len(ashape) != 1 or not _is_int(ashape[0]) or not 1 <= ashape[0] <= MAX_DIM:
            raise ExportError(f"{MANIFEST}: field 'spaces.action.shape' is {_short(ashape)}, expected [n]")
        act_low = _bounds(f, "spaces.action.low", ashape[0], True)
        act_high = _bounds(f, "spaces.action.high", ashape[0], True)
        if (act_low > act_high).any():
            raise ExportError(f"{MANIFEST}: field 'spaces.action.low' exceeds 'spaces.action.high'")
    else:
        raise ExportError(f"{MANIFEST}: field 'spaces.action.type' is {_short(act_kind)}, expected Discrete, Box, "
                          f"MultiDiscrete or MultiBinary")


def _inside(directory: str, root: str, name: str, prefix: str = "") -> str:
    path = os.path.join(directory, name)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ExportError(f"{name}: {prefix}missing from {directory}") from None
    except OSError as exc:
        raise ExportError(f"{name}: cannot be read ({_one_line(exc)})") from None
    if stat.S_ISLNK(st.st_mode):
        real = os.path.realpath(path)
        if os.path.commonpath([real, root]) != root:
            raise ExportError(f"{name}: a link leading out of the export directory (to {real})")
        try:
            st = os.stat(real)
        except OSError:
            raise ExportError(f"{name}: a broken link") from None
    if not stat.S_ISREG(st.st_mode):
        raise ExportError(f"{name}: not a regular file")
    return path



def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_manifest_json(directory: str) -> dict:
    """manifest.json of ``directory`` parsed (regular file, bounded size, a JSON object)."""
    if not os.path.isdir(directory):
        raise ExportError(f"{directory}: no such export directory")
    path = _inside(directory, os.path.realpath(directory), MANIFEST)
    if os.path.getsize(path) > MAX_MANIFEST_BYTES:
        raise ExportError(f"{MANIFEST}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        with open(path, "rb") as fh:
            d = json.loads(fh.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ExportError(f"{path} is not valid JSON: {_one_line(exc)}") from None
    if not isinstance(d, dict):
        raise ExportError(f"{MANIFEST}: expected a JSON object")
    return d


def open_export(directory: str, hashes: bool = True, golden: bool = True, manifest: Optional[dict] = None) -> Export:
    """Validate an export directory before anything runs: manifest fields and their consistency,
    file names, presence and sha256, golden set headers; raises ExportError (exit 2). Whether a
    backend's model file is there and loads is :func:`~.backends.make_runner`'s job."""
    export = Export(directory, read_manifest_json(directory) if manifest is None else manifest)
    if hashes:
        export.check_hashes()
    if golden:
        export.golden()
    return export


def _reset_actions(manifest: dict) -> tuple:
    """The actions training's env took after every reset (env.atari.fire_reset: FIRE, then 2)."""
    env = manifest.get("env")
    atari = env.get("atari") if isinstance(env, dict) else None
    fire = atari.get("fire_reset", False) if isinstance(atari, dict) else False
    if not isinstance(fire, bool):
        raise ExportError(f"{MANIFEST}: field 'env.atari.fire_reset' is {_short(fire)}, expected true or false")
    return FIRE_RESET_ACTIONS if fire else ()
