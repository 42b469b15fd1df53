"""The backends, one :class:`Backend` entry each in :data:`REGISTRY` (its name and aliases, the
formats it runs, the library it needs and how to install it, its loader), and the runner a
loader returns. Each library is imported when its backend is chosen.

The reader, the deployed policy, ``msrl verify``/``eval`` and the CLI's choices consult the
registry; nothing else lists the backends.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import BackendUnavailable, ExportError, _one_line
from .formats import BY_NAME as FORMAT_BY_NAME
from .formats import format_of_file
from .graph_io import ObsInput, split_rows, zero_inputs
from .names import CROSS_RUNTIME_ATOL

if TYPE_CHECKING:
    from .reader import Export


class Runner:
    """A loaded model at ``fixed_batch`` rows (None: any): ``run(x)`` -> the action batch from the
    packed observation rows; a recurrent graph's ``run_step(x, h, c, episode_start)`` -> (action,
    h', c'). ``run_all`` takes the graph's inputs in order and returns its outputs in order; the
    rows reach it cut into the graph's observation inputs (``obs_inputs``, graph_io.split_rows)."""

    def __init__(self, backend: str, run_all: Callable[[List[np.ndarray]], List[np.ndarray]],
                 fixed_batch: Optional[int], info: Optional[dict] = None, obs_inputs: Sequence[ObsInput] = ()):
        self.backend = backend
        self.run_all = run_all
        self.fixed_batch = fixed_batch
        self.info = info or {}
        self.obs_inputs = list(obs_inputs)

    def _obs(self, x: np.ndarray) -> List[np.ndarray]:
        return split_rows(self.obs_inputs, x) if self.obs_inputs else [x]

    def run(self, x: np.ndarray) -> np.ndarray:
        return self.run_all(self._obs(x))[0]

    def run_outputs(self, x: np.ndarray) -> List[np.ndarray]:
        """Every output of a non-recurrent graph (a distribution export's: the action, then the
        distribution's outputs)."""
        return [np.asarray(o) for o in self.run_all(self._obs(x))]

    def run_step(self, x, h, c, episode_start) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        out = self.run_step_outputs(x, h, c, episode_start)
        return out[0], out[1], out[2]

    def run_step_outputs(self, x, h, c, episode_start) -> List[np.ndarray]:
        """Every output of a recurrent graph: action, h_next, c_next (then a distribution export's)."""
        out = [np.asarray(o) for o in self.run_all(self._obs(x) + [h, c, episode_start])]
        if len(out) < 3:
            raise ExportError(f"{self.info.get('file', 'the model')}: returns {len(out)} outputs, a recurrent graph returns 3 "
                              f"(action, h_next, c_next)")
        return out


def probe_inputs(export: Export, b: int) -> List[np.ndarray]:
    """:func:`~.graph_io.zero_inputs` of the manifest's inputs at batch ``b``."""
    return zero_inputs(b, export.graph_inputs)


def _import(module: str, backend: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise BackendUnavailable(f"backend {backend} needs {module}, which is not installed; install "
                                 f"{get(backend).install}") from None


def make_runner(export: Export, backend: str, *, target: str = "cpu", device_id: int = 0,
                precision_mode: Optional[str] = None, threads: int = 1, configure=None, probe: bool = True,
                pin: bool = False) -> Runner:
    """Load the backend's model file of a validated export. Load failures and a model that does
    not run on the manifest's input shape raise ExportError naming the file, as does a model file
    the export does not hold. ``pin`` (Lite's CPU target, in this process): Lite's threads and the
    calling thread on one core for good (deploy.lite.lite_context; the calls' times: docs/benchmarks.md)."""
    entry = get(backend)
    backend = entry.name
    entry.require(export)
    name = entry.model_file(export)
    path = export.path(name)
    fixed = entry.fixed_batch(export)
    try:
        run, info = entry.loader(path, fixed, target=target, device_id=device_id, precision_mode=precision_mode,
                           threads=threads, configure=configure, pin=pin)
    except ExportError:
        raise
    except Exception as exc:  # every library has its own exception types for a broken model
        raise ExportError(f"{name}: backend {backend} cannot load it ({_one_line(exc)})") from None
    runner = Runner(backend, run, fixed, {**info, "file": name}, export.obs_inputs)
    if probe:  # the manifest's input shape; a dynamic batch claim is probed at two sizes
        for b in ([fixed] if fixed else sorted({export.golden_batch, 3})):
            try:
                outs = [np.asarray(o) for o in run(probe_inputs(export, b))]
            except Exception as exc:
                shapes = ", ".join(f"{n} {[b if fixed else None, *s]}" for n, s, _ in export.graph_inputs)
                raise ExportError(f"{name}: backend {backend} loads it but cannot run it on the manifest's inputs "
                                  f"({shapes}) at batch {b} ({_one_line(exc)})") from None
            want = [(b,)] + [(b, export.state_size)] * 2 if export.state_size else [(b,)]
            if len(outs) < len(want) or any(o.shape[:len(w)] != w for o, w in zip(outs, want)):
                raise ExportError(f"{name}: returns {[list(o.shape) for o in outs]} for a batch of {b}, expected "
                                  f"{len(want)} output(s) with leading shapes {[list(w) for w in want]}")
    return runner


def _onnxruntime(path, fixed, threads=1, **_):
    ort = _import("onnxruntime", "onnxruntime")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(xs):
        return session.run(None, dict(zip(names, xs)))
    return run, {"input": names[0], "version": ort.__version__}


def _mindspore(path, fixed, configure=None, **_):
    ms = _import("mindspore", "mindspore")
    from mindspore import Tensor, nn
    if configure is not None:
        configure()
    else:
        # GRAPH_MODE, CPU, deterministic kernels; each refused call means the process already
        # configured MindSpore (a caller's own code), which is left as it is.
        for call in (lambda: ms.set_context(mode=ms.GRAPH_MODE), lambda: ms.set_device("CPU"),
                     lambda: ms.set_deterministic(True)):
            try:
                call()
            except (RuntimeError, ValueError):
                pass
    with _quiet_fd2():  # MindSpore logs a broken file's parse errors from C++; the error message says it once
        graph = nn.GraphCell(ms.load(path))

    def run(xs):
        out = graph(*(Tensor(x) for x in xs))
        return [o.asnumpy() for o in out] if isinstance(out, (tuple, list)) else [out.asnumpy()]
    return run, {"version": ms.__version__}


class _quiet_fd2:
    """Silence file descriptor 2 (C++ library logs) for a block; what was written is re-emitted
    only when the block succeeds."""

    def __enter__(self):
        import tempfile
        try:
            sys.stderr.flush()
            self.saved = os.dup(2)
            self.tmp = tempfile.TemporaryFile()
            os.dup2(self.tmp.fileno(), 2)
        except (OSError, ValueError, AttributeError):
            self.saved = None
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.saved is None:
            return False
        os.dup2(self.saved, 2)
        os.close(self.saved)
        if exc_type is None:
            self.tmp.seek(0)
            data = self.tmp.read(1 << 16)
            if data:
                os.write(2, data)
        self.tmp.close()
        return False


def _lite(path, fixed, target="cpu", device_id=0, precision_mode=None, threads=1, pin=False, **_):
    """Lite's Python module or the installed shim (deploy.lite); in a child process (pinned) wherever
    MindSpore is installed, as the two cannot share a process (deploy.lite_process)."""
    from . import lite
    from .lite_process import LiteProcess, needs_own_process
    if needs_own_process():
        return LiteProcess().open(path, target=target, device_id=device_id, precision_mode=precision_mode,
                                  threads=threads)
    return lite.open_session(lite.binding(), path, target, device_id, precision_mode, threads, pin)


def _om(path, fixed, device_id=0, **_):
    """actor.om through ais_bench's InferSession, or aclruntime's InferenceSession where only that is installed."""
    import importlib
    try:
        interface = importlib.import_module("ais_bench.infer.interface")
    except ImportError:
        interface = None
    if interface is not None:
        session = interface.InferSession(int(device_id), path)

        def run(xs):
            return [np.asarray(o) for o in session.infer(list(xs), mode="static")]
        return run, {"api": "ais_bench.infer.interface.InferSession", "device_id": int(device_id)}
    try:
        acl = importlib.import_module("aclruntime")
    except ImportError:
        raise BackendUnavailable(f"backend om needs ais_bench (or aclruntime), which is not installed; install "
                                 f"{get('om').install}") from None
    options = acl.session_options()
    session = acl.InferenceSession(path, int(device_id), options)
    out_names = [o.name for o in session.get_outputs()]

    def run(xs):
        tensors = []
        for x in xs:
            t = acl.Tensor(np.ascontiguousarray(x))
            t.to_device(int(device_id))
            tensors.append(t)
        outs = session.run(out_names, tensors)
        for o in outs:
            o.to_host()
        return [np.array(o) for o in outs]
    return run, {"api": "aclruntime.InferenceSession", "device_id": int(device_id)}


def _lite_reads(path: str) -> bool:
    """Lite is installed here and reads this model file (not a MindIR newer than it knows)."""
    from . import lite
    return lite.available() and lite.reads(path)


@dataclass(frozen=True)
class Backend:
    """One backend: how it is named, what it runs, what it needs, how it loads."""

    name: str
    """Its one name (``--backend``, reports, the runner's ``backend``)."""
    aliases: Tuple[str, ...]
    """Other names ``--backend`` accepts for it."""
    formats: Tuple[str, ...]
    """The export formats (deploy.formats) whose file it runs, best first: it runs the first one
    the export holds; the file's format says the batch it is called with."""
    modules: Tuple[str, ...]
    """The Python modules it imports (any one suffices)."""
    install: str
    """How to install what it needs (error messages name it)."""
    loader: Callable[..., Tuple[Callable[[List[np.ndarray]], List[np.ndarray]], dict]]
    """``loader(path, fixed_batch, **options)`` -> (run_all, info)."""
    preference: int
    """Rank when no backend is named (``policy.load``, the guard's 'auto' fallback): lowest first."""
    same_engine: bool = False
    """The training cell's own engine: its fp32 actions are bit-identical with the training cell's
    (default tolerance 0; verify's criterion is identity, step for step)."""
    options: Tuple[str, ...] = ()
    """load_policy's keywords it takes from ``msrl verify``'s command line (target, device, precision_mode)."""
    probe: Optional[Callable[[str], bool]] = None
    """Whether this machine runs the model file at a path (None: one of ``modules`` imports)."""
    host: bool = True
    """It runs on the host CPU from a wheel, so ``msrl replay`` can recompute a trace with it."""

    def model_file(self, export: "Export") -> str:
        """The file it runs: the first of its formats' files the export holds (else the first)."""
        names = [FORMAT_BY_NAME[f].file for f in self.formats]
        return next((n for n in names if n in export.files), names[0])

    def fixed_batch(self, export: "Export") -> Optional[int]:
        """The batch its file must be called with (None: any), as the file's format says."""
        return getattr(export, format_of_file(self.model_file(export)).batch)

    def require(self, export: "Export") -> None:
        """Its model file is in the export, or an ExportError naming it (exit 2)."""
        name = self.model_file(export)
        if name not in export.files:
            fmt = format_of_file(name)
            hint = f"; export again with --format {fmt.name}" if fmt.reexport else ""
            raise ExportError(f"{name}: not in this export (formats: {', '.join(export.formats)}), needed by "
                              f"backend {self.name}{hint}")

    def here(self, export: "Export") -> bool:
        """The export holds its model file and this machine can run it."""
        name = self.model_file(export)
        if name not in export.files:
            return False
        if self.probe is not None:
            return self.probe(export.path(name))
        return any(importlib.util.find_spec(m) is not None for m in self.modules)


REGISTRY: Tuple[Backend, ...] = (
    Backend("mindspore_lite", ("lite",), ("lite", "mindir"), ("mindspore_lite",),
            "`msrl lite install` (Lite 2.0.0's libraries and msrl's shim; x86_64 Linux) or the MindSpore Lite wheel for "
            "your device and Python from https://www.mindspore.cn/lite/docs/en/master/use/downloads.html (plus CANN "
            "for target ascend)", _lite, preference=1, options=("target", "device", "precision_mode"),
            probe=_lite_reads),
    Backend("om", (), ("om",), ("ais_bench", "aclruntime"),
            "ais_bench and aclruntime (the ait benchmark wheels, https://gitee.com/ascend/ait) with CANN", _om,
            preference=0, host=False),
    Backend("onnxruntime", ("ort",), ("onnx",), ("onnxruntime",), "pip install onnxruntime", _onnxruntime,
            preference=2),
    Backend("mindspore", (), ("mindir",), ("mindspore",), "pip install mindspore (the CPU wheel matching your Python)",
            _mindspore, preference=3, same_engine=True),
)
"""Every backend, in the order the command line lists them."""
BY_NAME: Dict[str, Backend] = {b.name: b for b in REGISTRY}
ALIASES: Dict[str, str] = {a: b.name for b in REGISTRY for a in b.aliases}
BACKENDS: Tuple[str, ...] = tuple(BY_NAME)
CHOICES: Tuple[str, ...] = BACKENDS + tuple(ALIASES)
"""What ``--backend`` accepts: the names, then the aliases."""
HOST: Tuple[str, ...] = tuple(n for b in REGISTRY if b.host for n in (b.name, *b.aliases))
"""The backends (and aliases) that run on the host CPU from a wheel."""
REFERENCE: str = next(b.name for b in REGISTRY if b.same_engine)
"""The backend an export directory loads on when none is named: the training cell's own engine."""


def get(name: str) -> Backend:
    """The entry of a backend name or alias, or an ExportError naming the choices."""
    entry = BY_NAME.get(ALIASES.get(name, name)) if isinstance(name, str) else None
    if entry is None:
        raise ExportError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)} (or lite)")
    return entry


def canonical_backend(name: str) -> str:
    """The backend's one name (``lite`` -> ``mindspore_lite``, ``ort`` -> ``onnxruntime``)."""
    return get(name).name


def by_preference() -> List[Backend]:
    """The backends in the order a deployment tries them when none is named."""
    return sorted(REGISTRY, key=lambda b: b.preference)


def default_atol(backend: str, precision: str = "fp32", against: str = "train") -> float:
    """The default tolerance between ``backend``'s actions and ``against``'s: 0 (bit-identical)
    where the training cell's engine computes both in fp32 at the same batch shape, else
    CROSS_RUNTIME_ATOL. Discrete actions are always compared for equality."""
    same = BY_NAME.get(backend)
    same_engine = same is not None and same.same_engine and (against == "train" or against == backend)
    return 0.0 if same_engine and precision == "fp32" else CROSS_RUNTIME_ATOL


def require_model_file(export: "Export", backend: str) -> None:
    """The model file ``backend`` runs is in the export, or an ExportError naming it (exit 2)."""
    get(backend).require(export)
