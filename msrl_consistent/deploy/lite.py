"""MindSpore Lite, one runner and two bindings: Lite's own Python module (``mindspore_lite``, the
wheel Huawei builds for a board's Python) or, where that module cannot be imported, Lite's C++
libraries through msrl's C shim and ctypes (``msrl lite install`` puts both into a per-user
directory; this module finds them without msrl being importable).

The shim binding offers the part of ``mindspore_lite``'s API the runner calls (Context, Model,
ModelType, tensors' set_data_from_numpy / get_data_to_numpy), so :func:`open_session` makes the
same calls in the same order on both: context target, device id, explicit precision mode, build,
resize, predict. The shim validates every handle, pointer, index and byte count it is handed
(msrl_consistent/native/lite_shim.cc); this side checks dtypes and shapes before calling it.
"""
from __future__ import annotations

import ctypes
import json
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import BackendUnavailable, ExportError
from .names import LITE_ASCEND_PRECISION_MODES, LITE_CPU_PRECISION_MODES

HOME_ENV = "MSRL_LITE_HOME"
"""Names the directory ``msrl lite install`` installed into (default: :func:`default_home`)."""
RECORD = "install.json"
SHIM = "libmsrl_lite_shim.so"
SHIM_ABI = 2
"""The shim's C signatures; raised with every change of them (lite_shim.cc's kAbiVersion)."""
LITE_VERSION = "2.0.0"
MAX_MINDIR_VERSION = {"2.0.0": 1}
"""The newest MindIR version each Lite release reads (measured: 2.0.0 refuses MindSpore 2.10's version 3)."""
INSTALL_HINT = "run `msrl lite install` (or set MSRL_LITE_HOME to the directory it installed into)"
_ERR = 4096
_DTYPE: Dict[np.dtype, int] = {
    np.dtype(np.float32): 43, np.dtype(np.int32): 34, np.dtype(np.uint8): 37, np.dtype(np.int64): 35,
    np.dtype(np.float16): 42, np.dtype(np.float64): 44, np.dtype(np.int8): 32, np.dtype(np.bool_): 30}
"""NumPy dtype -> MindSpore's DataType code (include/api/data_type.h)."""
_NUMPY: Dict[int, np.dtype] = {v: k for k, v in _DTYPE.items()}


def default_home() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "msrl", "lite")


def lite_home(home: Optional[str] = None) -> str:
    return os.path.abspath(home or os.environ.get(HOME_ENV) or default_home())


def read_record(home: Optional[str] = None) -> Optional[dict]:
    """The install record of ``home`` (None when nothing is installed there); a damaged record
    raises BackendUnavailable naming it."""
    path = os.path.join(lite_home(home), RECORD)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as fh:
            record = json.loads(fh.read(1 << 20).decode("utf-8"))
        if not isinstance(record, dict) or not isinstance(record.get("shim"), str):
            raise ValueError("not an install record")
    except (OSError, ValueError) as exc:
        raise BackendUnavailable(f"{path}: damaged Lite install record ({exc}); run `msrl lite install --force`") from None
    return record


def shim_path(home: Optional[str] = None, record: Optional[dict] = None) -> str:
    """The installed shim's path (``record``: the install record, when the caller has read it)."""
    record = record or read_record(home)
    if record is None:
        raise BackendUnavailable(f"backend mindspore_lite needs MindSpore Lite, which is not installed here (no "
                                 f"mindspore_lite module, no Lite runtime in {lite_home(home)}); {INSTALL_HINT}")
    path = os.path.join(lite_home(home), record["shim"])
    if os.path.basename(path) != SHIM or not os.path.isfile(path):
        raise BackendUnavailable(f"{path}: the Lite shim named by {RECORD} is missing; run `msrl lite install --force`")
    return path


_LIBS: Dict[str, ctypes.CDLL] = {}


def load_shim(path: Optional[str] = None) -> ctypes.CDLL:
    """The shim library (loaded once per process), its functions typed."""
    path = path or shim_path()
    if path in _LIBS:
        return _LIBS[path]
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise BackendUnavailable(f"{path}: the Lite shim does not load ({exc}); run `msrl lite install --force`") from None
    c, i, p, s, z, i64 = ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int64
    for name, res, args in (
            ("msrl_lite_abi_version", i, []), ("msrl_lite_version", i, [c, z]),
            ("msrl_lite_open", p, [c, c, i, c, i, i, s, z]), ("msrl_lite_close", i, [p]), ("msrl_lite_count", i, [p, i]),
            ("msrl_lite_info", i, [p, i, i, ctypes.POINTER(i), ctypes.POINTER(i64), i, c, z]),
            ("msrl_lite_resize", i, [p, i, ctypes.POINTER(i), ctypes.POINTER(i64), s, z]),
            ("msrl_lite_set_input", i, [p, i, i, p, z, s, z]), ("msrl_lite_predict", i, [p, s, z]),
            ("msrl_lite_get_output", i, [p, i, p, z, s, z]), ("msrl_lite_convert", i, [c, c, c, c, s, z])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    if lib.msrl_lite_abi_version() != SHIM_ABI:
        raise BackendUnavailable(f"{path}: Lite shim ABI {lib.msrl_lite_abi_version()}, this code needs {SHIM_ABI}; "
                                 f"run `msrl lite install --force`")
    _LIBS[path] = lib
    return lib


def _check(code: int, err, what: str) -> int:
    if code < 0:
        raise RuntimeError(f"{what}: {err.value.decode('utf-8', 'replace') or 'failed'}")
    return code


class _Tensor:
    """One input or output of a built model (the shape of ``mindspore_lite.Tensor`` the runner uses)."""

    def __init__(self, model: "_Model", index: int, output: bool):
        self._model, self._index, self._output = model, index, output

    def _info(self) -> Tuple[np.dtype, List[int]]:
        lib, h = self._model._lib, self._model._handle
        dtype, shape = ctypes.c_int(), (ctypes.c_int64 * 8)()
        rank = lib.msrl_lite_info(h, int(self._output), self._index, ctypes.byref(dtype), shape, 8, None, 0)
        if rank < 0 or dtype.value not in _NUMPY:
            raise RuntimeError(f"Lite tensor {self._index}: no info (dtype code {dtype.value})")
        return _NUMPY[dtype.value], [int(d) for d in shape[:rank]]

    def set_data_from_numpy(self, x: np.ndarray) -> None:
        x = np.ascontiguousarray(x)
        if x.dtype not in _DTYPE:
            raise TypeError(f"Lite input {self._index}: dtype {x.dtype} has no Lite type")
        m = self._model
        _check(m._lib.msrl_lite_set_input(m._handle, self._index, _DTYPE[x.dtype], x.ctypes.data_as(ctypes.c_void_p),
                                          x.nbytes, m._err, _ERR), m._err, "set input")

    def get_data_to_numpy(self) -> np.ndarray:
        m = self._model
        if m._out_info is None:  # after a build or a resize: the outputs' dtypes and shapes, once
            m._out_info = [_Tensor(m, i, True)._info() for i in range(m._lib.msrl_lite_count(m._handle, 1))]
        dtype, shape = m._out_info[self._index]
        out = np.empty(shape, dtype)
        _check(m._lib.msrl_lite_get_output(m._handle, self._index, out.ctypes.data_as(ctypes.c_void_p), out.nbytes,
                                           m._err, _ERR), m._err, "get output")
        return out


class _Model:
    def __init__(self, lib: ctypes.CDLL):
        self._lib = lib
        self._handle: Optional[ctypes.c_void_p] = None
        self._err = ctypes.create_string_buffer(_ERR)
        self._out_info: Optional[list] = None

    def build_from_file(self, path: str, model_type, context) -> None:
        target = context.target[0]
        device = context.ascend if target == "ascend" else context.cpu
        handle = self._lib.msrl_lite_open(path.encode(), target.encode(), int(getattr(context.ascend, "device_id", 0)),
                                          str(device.precision_mode).encode(), int(context.cpu.thread_num),
                                          int(context.cpu.thread_affinity_mode), self._err, _ERR)
        if not handle:
            raise RuntimeError(self._err.value.decode("utf-8", "replace") or "Build failed")
        self._handle = ctypes.c_void_p(handle)

    def get_inputs(self) -> List[_Tensor]:
        return [_Tensor(self, i, False) for i in range(self._lib.msrl_lite_count(self._handle, 0))]

    def resize(self, inputs: Sequence[_Tensor], shapes: Sequence[Sequence[int]]) -> None:
        ranks = (ctypes.c_int * len(shapes))(*[len(s) for s in shapes])
        flat = [int(d) for s in shapes for d in s]
        dims = (ctypes.c_int64 * max(1, len(flat)))(*flat)
        _check(self._lib.msrl_lite_resize(self._handle, len(shapes), ranks, dims, self._err, _ERR), self._err, "resize")
        self._out_info = None

    def predict(self, inputs: Sequence[_Tensor]) -> List[_Tensor]:
        n = _check(self._lib.msrl_lite_predict(self._handle, self._err, _ERR), self._err, "predict")
        return [_Tensor(self, i, True) for i in range(n)]

    def __del__(self):
        if self._handle is not None:
            self._lib.msrl_lite_close(self._handle)
            self._handle = None


class _Device:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class ShimBinding:
    """``mindspore_lite``'s Context / Model / ModelType over the shim (``mslite`` in :func:`open_session`)."""

    name = "shim"

    class ModelType:
        MINDIR = "MINDIR"

    def __init__(self, home: Optional[str] = None):
        record = read_record(home)
        self.path = shim_path(home, record)
        self.lib = load_shim(self.path)
        self.version = str((record or {}).get("lite_version", LITE_VERSION))

    def Context(self):  # noqa: N802  (the name of mindspore_lite's class)
        ctx = _Device(target=["cpu"])
        ctx.cpu = _Device(precision_mode="enforce_fp32", thread_num=1, thread_affinity_mode=0)
        ctx.ascend = _Device(precision_mode="enforce_fp16", device_id=0)  # Lite's own default: always overwritten
        return ctx

    def Model(self) -> _Model:  # noqa: N802
        return _Model(self.lib)

    def convert(self, onnx_path: str, output_base: str, config_file: str = "", device: str = "") -> str:
        """ONNX -> Lite MindIR at ``output_base + '.mindir'``; raises RuntimeError with the converter's status."""
        err = ctypes.create_string_buffer(_ERR)
        _check(self.lib.msrl_lite_convert(onnx_path.encode(), output_base.encode(), config_file.encode(), device.encode(),
                                          err, _ERR), err, "convert")
        return output_base + ".mindir"


def binding(prefer: Optional[str] = None):
    """Lite's Python module where it imports (``prefer='python'`` requires it), else the installed
    shim (``prefer='shim'`` requires it); BackendUnavailable naming both when neither is here."""
    if prefer not in (None, "python", "shim"):
        raise ExportError(f"Lite binding must be 'python' or 'shim', got {prefer!r}")
    if prefer != "shim":
        try:
            import mindspore_lite
            return mindspore_lite
        except ImportError:
            if prefer == "python":
                raise BackendUnavailable("Lite binding 'python' needs the mindspore_lite module, which is not "
                                         "installed (Huawei's wheel for this device and Python)") from None
    return ShimBinding()


def convert(mslite, onnx_path: str, output_base: str, config_file: str = "", target: str = "cpu") -> str:
    """Lite's converter on either binding: ONNX -> a Lite MindIR at ``output_base + '.mindir'``, fp32
    weights (never the converter's weight_fp16), the options of ``config_file`` (e.g. [ascend_context]);
    target 'ascend' is the converter's ascend_oriented optimization (it compiles with CANN)."""
    if isinstance(mslite, ShimBinding):
        return mslite.convert(onnx_path, output_base, config_file, "Ascend" if target == "ascend" else "")
    converter = mslite.Converter()
    converter.save_type = mslite.ModelType.MINDIR
    converter.weight_fp16 = False
    converter.optimize = "ascend_oriented" if target == "ascend" else "general"
    converter.convert(mslite.FmkType.ONNX, onnx_path, output_base, config_file=config_file)
    return output_base + ".mindir"


def binding_version(mslite) -> str:
    return str(getattr(mslite, "version", None) or getattr(mslite, "__version__", "unknown"))


def available() -> bool:
    import importlib.util
    if importlib.util.find_spec("mindspore_lite") is not None:
        return True
    try:
        return read_record() is not None
    except BackendUnavailable:
        return False


def installed_version() -> Optional[str]:
    """The version of the Lite here (its Python module's distribution, else the installed shim's), or None."""
    import importlib.metadata
    try:
        return importlib.metadata.version("mindspore-lite")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        record = read_record()
    except BackendUnavailable:
        return None
    return None if record is None else str(record.get("lite_version", LITE_VERSION))


def reads(path: str) -> bool:
    """Whether the Lite here reads this MindIR file's version (its converter writes version 1)."""
    version, most = mindir_version(path), MAX_MINDIR_VERSION.get(installed_version() or "")
    return version is not None and most is not None and version <= most


def mindir_version(path: str) -> Optional[int]:
    """A MindIR file's ``mind_ir_version`` (ModelProto field 13; protobuf read at the top level
    only), None when the file does not carry one."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None

    def varint(pos: int) -> Tuple[int, int]:
        value = shift = 0
        while pos < len(data) and shift < 64:
            b = data[pos]
            value |= (b & 0x7F) << shift
            pos += 1
            if b < 0x80:
                return value, pos
            shift += 7
        raise ValueError("truncated varint")

    pos = 0
    try:
        while pos < len(data):
            key, pos = varint(pos)
            field, wire = key >> 3, key & 7
            if wire == 0:
                value, pos = varint(pos)
                if field == 13:
                    return value
            elif wire == 2:
                n, pos = varint(pos)
                pos += n
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                return None
    except ValueError:
        return None
    return None


def lite_context(mslite, target: str = "cpu", device_id: int = 0, precision_mode: Optional[str] = None,
                threads: int = 1, pin: bool = False):
    """A Lite Context with an explicit precision mode (never Lite's fp16 default on Ascend). ``pin``:
    Lite's CPU threads and the calling thread on one core (affinity mode 2), for a process of its own:
    Lite runs each call on an actor thread of its own while the caller waits, and where the two
    threads land on different cores every call pays two cross-core wake-ups (docs/benchmarks.md)."""
    if target not in ("cpu", "ascend"):
        raise ExportError(f"lite target must be 'cpu' or 'ascend', got {target!r}")
    context = mslite.Context()
    context.target = [target]
    mode = precision_mode or "enforce_fp32"
    if target == "ascend":
        if mode not in LITE_ASCEND_PRECISION_MODES:
            raise ExportError(f"lite ascend precision_mode must be one of {LITE_ASCEND_PRECISION_MODES}, got {mode!r}")
        context.ascend.device_id = int(device_id)
        context.ascend.precision_mode = mode
    elif mode not in LITE_CPU_PRECISION_MODES:
        raise ExportError(f"lite cpu precision_mode must be one of {LITE_CPU_PRECISION_MODES}, got {mode!r}")
    context.cpu.precision_mode = "enforce_fp32" if target == "ascend" else mode
    context.cpu.thread_num = int(threads)
    if pin and target == "cpu" and threads == 1:
        context.cpu.thread_affinity_mode = 2
    return context, mode


def open_session(mslite, path: str, target: str = "cpu", device_id: int = 0, precision_mode: Optional[str] = None,
                 threads: int = 1, pin: bool = False) -> Tuple[Callable[[List[np.ndarray]], List[np.ndarray]], dict]:
    """The runner's call sequence on either binding: context, build, then per call resize (when the
    shapes change), set inputs, predict. Returns (run(inputs) -> outputs, info)."""
    context, mode = lite_context(mslite, target, device_id, precision_mode, threads, pin)
    model = mslite.Model()
    try:
        model.build_from_file(path, mslite.ModelType.MINDIR, context)
    except Exception as exc:
        version, lite = mindir_version(path), binding_version(mslite)
        most = MAX_MINDIR_VERSION.get(lite)
        if version is not None and most is not None and version > most:
            raise ExportError(f"{os.path.basename(path)}: MindIR version {version} (MindSpore's own export); MindSpore "
                              f"Lite {lite} reads MindIR up to version {most}: export with --format lite, which converts "
                              f"actor.onnx with Lite's own converter") from None
        if target == "ascend":
            raise BackendUnavailable(f"Lite target ascend could not start on this machine ({exc}): Lite's Ascend plugin "
                                     f"needs CANN's runtime and an Ascend device (source CANN's set_env.sh)") from None
        raise RuntimeError(f"Lite cannot build {os.path.basename(path)} ({exc})") from None
    inputs = model.get_inputs()
    state: dict = {"shapes": None}

    def run(xs: List[np.ndarray]) -> List[np.ndarray]:
        shapes = [list(x.shape) for x in xs]
        if state["shapes"] != shapes:
            model.resize(inputs, shapes)
            state["shapes"] = shapes
        for tensor, x in zip(inputs, xs):
            tensor.set_data_from_numpy(np.ascontiguousarray(x))
        return [o.get_data_to_numpy() for o in model.predict(inputs)]
    return run, {"target": target, "precision_mode": mode, "device_id": int(device_id), "pinned": bool(pin),
                 "binding": getattr(mslite, "name", "python"), "lite_version": binding_version(mslite)}
