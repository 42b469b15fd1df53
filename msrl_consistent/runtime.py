"""Load a policy on a backend and act with it: the one entry point deployments and `verify` use.

``load_policy(PATH, backend=...)``:

* PATH a **run directory**, backend ``train``: the training-time PolicyCell rebuilt from the
  run's config and checkpoint (the reference every export is compared with).
* PATH an **export directory** (it has ``manifest.json``):

  - ``mindspore``: ``mindspore.load`` + ``nn.GraphCell`` on actor.mindir;
  - ``onnxruntime``: ``onnxruntime.InferenceSession`` on actor.onnx (CPU provider);
  - ``lite``: ``mindspore_lite.Model.build_from_file(actor.mindir, ModelType.MINDIR, context)``
    with target ``cpu`` or ``ascend``, a device id and an explicit precision mode (Lite's
    Ascend default is fp16: we never rely on it).

``policy.act(obs)`` takes one observation ``(obs_dim,)`` or a batch ``(B, obs_dim)`` and
returns the environment action(s) as a NumPy array (int32 indices or float32 vectors).
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from .config import ConfigError, EnvConfig
from .envs import SpaceSpec
from .manifest import is_export_dir, read_manifest
from .optional import ONNX_INSTALL, MissingOptionalPackage, require

BACKENDS = ("train", "mindspore", "onnxruntime", "lite")
CROSS_RUNTIME_ATOL = 1e-5
"""Default tolerance of continuous actions computed by another runtime than MindSpore (ONNX Runtime, Lite)."""
LITE_ASCEND_PRECISION_MODES = ("enforce_fp32", "preferred_fp32", "enforce_fp16", "enforce_origin", "preferred_optimal")
LITE_CPU_PRECISION_MODES = ("enforce_fp32", "preferred_fp16")


class BackendUnavailable(MissingOptionalPackage):
    """An optional backend package is not installed (the message names it and how to install it)."""


def default_atol(backend: str, precision: str = "fp32", against: str = "train") -> float:
    """The default tolerance between ``backend``'s actions and ``against``'s: 0 (bit-identical)
    where MindSpore computes both in fp32 at the same batch shape, else CROSS_RUNTIME_ATOL.
    Discrete actions are always compared for equality."""
    same_engine = backend == "mindspore" and against in ("train", "mindspore")
    return 0.0 if same_engine and precision == "fp32" else CROSS_RUNTIME_ATOL


def in_chunks(run, x: np.ndarray, batch: int) -> np.ndarray:
    """``run`` on ``x`` in calls of exactly ``batch`` rows (the last one padded by repeating its
    last row; the padding's outputs are dropped)."""
    if x.shape[0] == batch:
        return run(x)
    outs = []
    for start in range(0, x.shape[0], batch):
        chunk = x[start:start + batch]
        n = chunk.shape[0]
        if n < batch:
            chunk = np.concatenate([chunk, np.repeat(chunk[-1:], batch - n, axis=0)])
        outs.append(run(chunk)[:n])
    return np.concatenate(outs)


def read_run_config(run_dir: str):
    """The resolved config.yaml of a run directory, validated."""
    from .config import load_config

    path = os.path.join(run_dir, "config.yaml")
    if not os.path.isfile(path):
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml) and not an export directory "
                          f"(no manifest.json)")
    return load_config(path)


class Policy:
    """Input validation, batching and output shaping shared by every backend."""

    backend = ""

    def __init__(self, spec: SpaceSpec, fixed_batch: Optional[int], env_cfg: EnvConfig):
        self.spec = spec
        self.fixed_batch = fixed_batch
        self._env_cfg = env_cfg

    @property
    def obs_dim(self) -> int:
        return self.spec.obs_dim

    def env_config(self) -> EnvConfig:
        return self._env_cfg

    def validate(self, obs) -> np.ndarray:
        arr = np.asarray(obs)
        expected = f"float32 observations of shape ({self.obs_dim},) or (batch, {self.obs_dim})"
        if arr.dtype == object or not np.issubdtype(arr.dtype, np.floating):
            raise ValueError(f"expected {expected}, got dtype {arr.dtype}")
        if arr.ndim == 1:
            arr = arr.reshape(1, -1)
        if arr.ndim != 2 or arr.shape[1] != self.obs_dim or arr.shape[0] < 1:
            raise ValueError(f"expected {expected}, got shape {np.shape(obs)}")
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if not np.all(np.isfinite(arr)):
            bad = np.argwhere(~np.isfinite(arr))[0]
            raise ValueError(f"expected finite observations, got {arr[tuple(bad)]} at index {tuple(int(i) for i in bad)}")
        return arr

    recorder = None

    def act(self, obs) -> np.ndarray:
        single = np.ndim(obs) == 1
        x = self.validate(obs)
        out = self.run_batched(x)
        if self.recorder is not None:
            self.recorder.record(x, out)
        return out[0] if single else out

    def start_recording(self, path: str, limit: int = 100_000, source_sha256: str = ""):
        """Record every observation and action of later ``act`` calls into the trace ``path``."""
        from .recording import TraceRecorder
        self.recorder = TraceRecorder(path, source_sha256, self.backend, self.obs_dim, self.spec.discrete, limit)
        return self.recorder

    def run_batched(self, x: np.ndarray) -> np.ndarray:
        """Run at the artifact's batch shape: chunks of ``fixed_batch`` (the last one padded)."""
        if self.fixed_batch is None:
            return self._run(x)
        return in_chunks(self._run, x, self.fixed_batch)

    def act_at_batch(self, obs: np.ndarray, batch: int) -> np.ndarray:
        """Actions for ``obs`` computed ``batch`` rows per call (the golden set's reference shape)."""
        return in_chunks(lambda chunk: self.run_batched(self.validate(chunk)), np.asarray(obs), batch)

    def _run(self, x: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


class TrainCellPolicy(Policy):
    """The training-time PolicyCell, rebuilt from a run directory's config and checkpoint."""

    backend = "train"

    def __init__(self, run_dir: str, checkpoint: Optional[str] = None, precision: str = "fp32"):
        from mindspore import Tensor

        from . import checkpoint as ckpt
        from .determinism import configure_mindspore
        from .envs import env_spec
        from .networks import CastIO, load_agent_parameters
        from .registry import build_agent

        cfg = read_run_config(run_dir)
        configure_mindspore(cfg.device)
        path = checkpoint or ckpt.latest_checkpoint(run_dir)
        tensors, meta = ckpt.load_checkpoint(path)
        if meta.get("algorithm") != cfg.algorithm:
            raise ckpt.CheckpointError(f"{path} was written by algorithm {meta.get('algorithm')!r}, "
                                       f"but {run_dir}/config.yaml says {cfg.algorithm!r}")
        spec = env_spec(cfg.env)
        agent = build_agent(cfg, spec, np.random.default_rng(0))
        load_agent_parameters(agent, tensors, path)
        super().__init__(spec, None, cfg.env)
        self.cfg = cfg
        self.agent = agent
        self.checkpoint = path
        self.cell = agent.policy_cell()
        if precision == "fp16":
            import mindspore as ms
            self.cell = CastIO(self.cell.to_float(ms.float16), spec.discrete)
        elif precision == "fp16-matmul":
            from .networks import fp16_matmuls
            fp16_matmuls(agent)
            self.cell = agent.policy_cell()
        elif precision != "fp32":
            raise ValueError(f"precision {precision!r}: expected fp32, fp16 or fp16-matmul")
        self._Tensor = Tensor

    def _run(self, x: np.ndarray) -> np.ndarray:
        return self.cell(self._Tensor(x)).asnumpy()


class ExportedPolicy(Policy):
    """Common loading of an export directory's manifest."""

    def __init__(self, export_dir: str):
        self.export_dir = export_dir
        self.manifest = read_manifest(export_dir)
        super().__init__(self.manifest.spec, None, self.manifest.env_config())
        self.io = self.manifest.io
        self.fixed_batch = None if self.manifest.export.dynamic else int(self.manifest.export.batch)

    def artifact(self, name: str) -> str:
        path = os.path.join(self.export_dir, name)
        if not os.path.isfile(path):
            hint = "; export again with --format mindir,onnx" if name.endswith(".onnx") else ""
            raise ConfigError(f"{self.export_dir} has no {name} (exported formats: "
                              f"{', '.join(self.manifest.export.formats)}){hint}")
        return path


class MindSporePolicy(ExportedPolicy):
    backend = "mindspore"

    def __init__(self, export_dir: str):
        super().__init__(export_dir)
        import mindspore as ms
        from mindspore import Tensor, nn

        from .determinism import configure_mindspore

        configure_mindspore("CPU")
        self.graph = nn.GraphCell(ms.load(self.artifact("actor.mindir")))
        self._Tensor = Tensor

    def _run(self, x: np.ndarray) -> np.ndarray:
        return self.graph(self._Tensor(x)).asnumpy()


class OnnxRuntimePolicy(ExportedPolicy):
    backend = "onnxruntime"

    def __init__(self, export_dir: str, threads: int = 1):
        super().__init__(export_dir)
        try:
            ort = require("onnxruntime", "backend 'onnxruntime'", ONNX_INSTALL)
        except MissingOptionalPackage as exc:
            raise BackendUnavailable(str(exc)) from None
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(self.artifact("actor.onnx"), opts, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name
        self.fixed_batch = int(self.manifest.export.golden_batch)

    def _run(self, x: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input_name: x})[0]


def lite_context(target: str = "cpu", device_id: int = 0, precision_mode: Optional[str] = None):
    """A mindspore_lite.Context with an explicit precision mode (never Lite's fp16 default).

    target 'ascend': precision_mode one of LITE_ASCEND_PRECISION_MODES (default enforce_fp32;
    'enforce_origin' maps to ACL's must_keep_origin_dtype). target 'cpu': one of
    LITE_CPU_PRECISION_MODES (default enforce_fp32).
    """
    try:
        import mindspore_lite as mslite
    except ImportError:
        raise BackendUnavailable(
            "backend 'lite' needs MindSpore Lite (the mindspore_lite package), which is not installed. "
            "Install the MindSpore Lite wheel matching your device and Python from "
            "https://www.mindspore.cn/lite/docs/en/master/use/downloads.html (PyPI has no current build), "
            "plus CANN for target 'ascend'.") from None
    if target not in ("cpu", "ascend"):
        raise ValueError(f"lite target must be 'cpu' or 'ascend', got {target!r}")
    context = mslite.Context()
    context.target = [target]
    if target == "ascend":
        mode = precision_mode or "enforce_fp32"
        if mode not in LITE_ASCEND_PRECISION_MODES:
            raise ValueError(f"lite ascend precision_mode must be one of {LITE_ASCEND_PRECISION_MODES}, got {mode!r}")
        context.ascend.device_id = int(device_id)
        context.ascend.precision_mode = mode
    else:
        mode = precision_mode or "enforce_fp32"
        if mode not in LITE_CPU_PRECISION_MODES:
            raise ValueError(f"lite cpu precision_mode must be one of {LITE_CPU_PRECISION_MODES}, got {mode!r}")
        context.cpu.precision_mode = mode
        context.cpu.thread_num = 1
    return mslite, context, mode


class LitePolicy(ExportedPolicy):
    """MindSpore Lite builds actor.mindir itself (the direct route to Ascend 310P, no ATC step)."""

    backend = "lite"

    def __init__(self, export_dir: str, target: str = "cpu", device_id: int = 0, precision_mode: Optional[str] = None):
        super().__init__(export_dir)
        mslite, context, self.precision_mode = lite_context(target, device_id, precision_mode)
        self.model = mslite.Model()
        self.model.build_from_file(self.artifact("actor.mindir"), mslite.ModelType.MINDIR, context)
        self.inputs = self.model.get_inputs()
        self._shape = None

    def _run(self, x: np.ndarray) -> np.ndarray:
        if self._shape != x.shape:
            self.model.resize(self.inputs, [list(x.shape)])
            self._shape = x.shape
        self.inputs[0].set_data_from_numpy(x)
        return self.model.predict(self.inputs)[0].get_data_to_numpy()


def load_policy(path: str, backend: Optional[str] = None, checkpoint: Optional[str] = None,
                device: int = 0, target: str = "cpu", precision_mode: Optional[str] = None,
                precision: str = "fp32", record: Optional[str] = None, record_limit: int = 100_000) -> Policy:
    """Load a policy from a run directory (backend 'train') or an export directory.

    ``record=PATH`` writes every observation given to ``act`` and every action returned to the
    trace PATH (bounded by ``record_limit`` observations), tagged with the sha256 of the
    export's manifest.json (or of the run's checkpoint), for ``msrl replay``.
    """
    policy = _load(path, backend, checkpoint, device, target, precision_mode, precision)
    if record:
        from .determinism import file_sha256
        source = os.path.join(path, "manifest.json") if is_export_dir(path) else getattr(policy, "checkpoint", "")
        policy.start_recording(record, record_limit, file_sha256(source) if source else "")
    return policy


def _load(path, backend, checkpoint, device, target, precision_mode, precision) -> Policy:
    if not os.path.isdir(path):
        raise ConfigError(f"no such run or export directory: {path}")
    if is_export_dir(path):
        backend = backend or "mindspore"
        if backend == "mindspore":
            return MindSporePolicy(path)
        if backend == "onnxruntime":
            return OnnxRuntimePolicy(path)
        if backend == "lite":
            return LitePolicy(path, target, device, precision_mode)
        if backend == "train":
            src = read_manifest(path).source
            if not os.path.isdir(src.run_dir):
                raise ConfigError(f"{path}: the source run {src.run_dir} is not present")
            # The reference: the fp32 training cell of the source run, whatever the export's precision.
            return TrainCellPolicy(src.run_dir, src.checkpoint)
        raise ConfigError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    backend = backend or "train"
    if backend != "train":
        raise ConfigError(f"{path} is a run directory: only backend 'train' applies (got {backend!r}); "
                          f"export it first with `msrl export {path} --out DIR`")
    return TrainCellPolicy(path, checkpoint, precision)
