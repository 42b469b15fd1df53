"""Reading the pickles inside Stable-Baselines3 files without executing them.

SB3 model zips hold three kinds of pickle: cloudpickled blobs in the ``data`` JSON (the policy
class, the policy kwargs), torch pickles (``policy.pth``, ``pytorch_variables.pth``) and the
plain pickle ``vecnormalize.pkl``. Unpickling runs whatever callable the file names, so a model
file from elsewhere would be a code-execution risk. Here:

* ``pickle_globals``: the (module, name) pairs a pickle refers to, from its opcodes
  (``pickletools.genops``), without loading anything: how the policy class and the activation
  are identified.
* ``read_torch_tensors``: a torch zip pickle through an unpickler whose ``find_class`` admits
  only ``collections.OrderedDict``, ``torch._utils._rebuild_tensor_v2`` (answered by a NumPy
  function) and torch's storage type names (answered by dtypes); the storages are read from the
  archive's ``data/<key>`` entries as NumPy arrays. No torch needed.
* ``read_vecnormalize``: a VecNormalize pickle through an unpickler that admits NumPy's array
  reconstruction, dtypes and scalars, and SB3's VecNormalize / RunningMeanStd and gymnasium's
  space classes as plain records (their state a dict, nothing of theirs runs).

Anything else a pickle names is refused with :class:`UnsafePickle` (a ConfigError: ``msrl:
error:``, exit 2) naming the file and the global.
"""
from __future__ import annotations

import collections
import io
import pickle
import pickletools
import zipfile
from typing import Dict, List, Tuple

import numpy as np

from ..config import ConfigError


class UnsafePickle(ConfigError):
    """A pickle names something msrl import does not admit (it is never loaded)."""


def pickle_globals(blob: bytes, where: str) -> List[Tuple[str, str]]:
    """Every (module, name) a pickle's GLOBAL / STACK_GLOBAL opcodes refer to, in order, read from
    the opcodes alone (the strings STACK_GLOBAL takes are tracked through the memo)."""
    out: List[Tuple[str, str]] = []
    stack: List[object] = []
    memo: Dict[int, object] = {}
    try:
        for op, arg, _ in pickletools.genops(blob):
            name = op.name
            if name == "GLOBAL":
                module, _, qual = str(arg).partition(" ")
                out.append((module, qual))
                stack.append(None)
            elif name == "STACK_GLOBAL":
                qual, module = (stack.pop() if stack else None), (stack.pop() if stack else None)
                out.append((str(module), str(qual)))
                stack.append(None)
            elif name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8", "SHORT_BINSTRING",
                          "BINSTRING", "STRING"):
                stack.append(arg)
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1] if stack else None
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[int(arg)] = stack[-1] if stack else None  # type: ignore[arg-type]
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                stack.append(memo.get(int(arg)))  # type: ignore[arg-type]
            elif op.stack_after:
                stack.append(None)
    except Exception as exc:
        raise ConfigError(f"{where}: not a readable pickle ({exc})") from None
    return out


# torch's zip pickles ----------------------------------------------------------------------------
_STORAGES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
             "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
             "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}


class _Storage:
    """What a storage type name unpickles to: the dtype of its elements."""

    def __init__(self, name: str):
        self.name = name
        self.dtype = np.dtype(_STORAGES[name])


class _TorchReader(pickle.Unpickler):
    def __init__(self, archive: zipfile.ZipFile, prefix: str, where: str):
        super().__init__(io.BytesIO(archive.read(prefix + "data.pkl")))
        self.archive, self.prefix, self.where = archive, prefix, where
        self.storages: Dict[str, np.ndarray] = {}

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return self._rebuild
        if module == "torch" and name in _STORAGES:
            return _Storage(name)
        raise UnsafePickle(f"{self.where} names {module}.{name}, which msrl import does not load (a torch state "
                           f"dict holds only OrderedDict, _rebuild_tensor_v2 and storages of "
                           f"{', '.join(sorted(_STORAGES))}); the file was not unpickled further")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _Storage)):
            raise UnsafePickle(f"{self.where}: unexpected persistent id {pid!r} (expected a torch storage)")
        _, storage, key, _location, numel = pid
        key = str(key)
        if key not in self.storages:
            entry = f"{self.prefix}data/{key}"
            try:
                raw = self.archive.read(entry)
            except KeyError:
                raise ConfigError(f"{self.where}: storage {entry} is missing from the archive") from None
            if len(raw) < int(numel) * storage.dtype.itemsize:
                raise ConfigError(f"{self.where}: storage {entry} holds {len(raw)} bytes, expected "
                                  f"{int(numel) * storage.dtype.itemsize}")
            self.storages[key] = np.frombuffer(raw, storage.dtype, int(numel))
        return self.storages[key]

    def _rebuild(self, storage, offset, size, stride, *_rest):
        if not isinstance(storage, np.ndarray):
            raise UnsafePickle(f"{self.where}: a tensor rebuilt from {type(storage).__name__}, not a storage")
        size, stride, offset = tuple(int(s) for s in size), tuple(int(s) for s in stride), int(offset)
        last = offset + sum((n - 1) * s for n, s in zip(size, stride)) if all(n > 0 for n in size) else offset
        if len(size) != len(stride) or min(stride, default=0) < 0 or last >= max(storage.size, 1):
            raise ConfigError(f"{self.where}: a tensor of size {size}, stride {stride}, offset {offset} reaches "
                              f"past its storage of {storage.size} elements")
        item = storage.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(storage[offset:], size, tuple(s * item for s in stride))
        return np.array(view, copy=True)


def read_torch_tensors(blob: bytes, where: str) -> Dict[str, np.ndarray]:
    """{name: array} of a torch.save'd dict of tensors (a state dict, pytorch_variables.pth)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(blob))
        names = archive.namelist()
    except zipfile.BadZipFile:
        raise ConfigError(f"{where}: not a torch zip archive (legacy torch files are not read)") from None
    pkl = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
    if len(pkl) != 1:
        raise ConfigError(f"{where}: expected one <archive>/data.pkl entry, found {pkl or 'none'}")
    prefix = pkl[0][:-len("data.pkl")]
    if prefix + "byteorder" in names and archive.read(prefix + "byteorder").strip() not in (b"little", b""):
        raise ConfigError(f"{where}: big-endian tensors are not read")
    try:
        obj = _TorchReader(archive, prefix, where).load()
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"{where}: cannot read the torch pickle ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, np.ndarray) for k, v in obj.items()):
        raise ConfigError(f"{where}: expected a dict of tensors, found {type(obj).__name__}")
    return dict(obj)


# vecnormalize.pkl -------------------------------------------------------------------------------------
class Record:
    """A stand-in for an admitted class: built without arguments, its pickled state kept as a dict."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        self.state: dict = {}

    def __setstate__(self, state):
        self.state = state if isinstance(state, dict) else {"value": state}


_RECORDS = {
    ("stable_baselines3.common.vec_env.vec_normalize", "VecNormalize"),
    ("stable_baselines3.common.running_mean_std", "RunningMeanStd"),
    ("numpy.random._pickle", "__generator_ctor"), ("numpy.random._pickle", "__bit_generator_ctor"),
    ("numpy.random._pickle", "__randomstate_ctor"),
} | {("gymnasium.spaces." + m, n) for m, n in (("box", "Box"), ("discrete", "Discrete"), ("multi_discrete", "MultiDiscrete"),
                                               ("multi_binary", "MultiBinary"), ("dict", "Dict"), ("tuple", "Tuple"))}
_NUMPY = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
          ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
          ("numpy._core.multiarray", "scalar"), ("collections", "OrderedDict")}


class _VecNormalizeReader(pickle.Unpickler):
    def __init__(self, blob: bytes, where: str):
        super().__init__(io.BytesIO(blob))
        self.where = where

    def find_class(self, module, name):
        if (module, name) in _NUMPY:
            return super().find_class(module, name)
        if (module, name) in _RECORDS:
            return type(name, (Record,), {})
        raise UnsafePickle(f"{self.where} names {module}.{name}, which msrl import does not load (a VecNormalize "
                           f"pickle holds NumPy arrays and SB3's VecNormalize, RunningMeanStd and space classes); "
                           f"the file was not unpickled further")

    def persistent_load(self, pid):
        raise UnsafePickle(f"{self.where}: unexpected persistent id {pid!r}")


def read_vecnormalize(blob: bytes, where: str) -> dict:
    """The VecNormalize's pickled state as a dict, its obs_rms / ret_rms as dicts too."""
    try:
        obj = _VecNormalizeReader(blob, where).load()
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"{where}: cannot read the VecNormalize pickle ({type(exc).__name__}: {exc})") from None
    if type(obj).__name__ != "VecNormalize" or not isinstance(obj, Record):
        raise ConfigError(f"{where}: expected a pickled VecNormalize, found {type(obj).__name__}")
    state = dict(obj.state)
    for key in ("obs_rms", "ret_rms"):
        if isinstance(state.get(key), Record):
            state[key] = dict(state[key].state)
    return state
