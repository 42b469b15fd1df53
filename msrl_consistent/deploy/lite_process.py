"""Lite in a process of its own: MindSpore 2.10 and Lite 2.0.0 cannot share one (with MindSpore's
libraries loaded, Lite's fail to resolve ``typeinfo for mindspore::ops::PoolGrad``), so msrl,
whose process has MindSpore, runs Lite's converter and models in a child process.

The child is this interpreter with this package on its path (the bundle's zip or msrl's deploy
package); requests go to its stdin, replies come back on its original stdout, and what Lite
itself writes to stdout or stderr goes to a temporary file that error messages quote from.
Framing: one JSON line announcing each array's dtype and shape, then their raw bytes (no pickle).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Callable, List, Optional, Tuple

import numpy as np

from .errors import BackendUnavailable, ExportError

_BOOT = ("import sys, json, importlib; sys.path[:0] = json.loads(sys.argv[1]); "
         "importlib.import_module(sys.argv[2] + '.lite_process').serve()")


def needs_own_process() -> bool:
    """Whether MindSpore is loaded here or can be (installed): Lite loaded first breaks a later
    ``import mindspore`` as surely as the other way round."""
    import importlib.util
    return "mindspore" in sys.modules or importlib.util.find_spec("mindspore") is not None


_DTYPES = ("float32", "float64", "float16", "int32", "int64", "int8", "uint8", "bool")
_MAX_BYTES = 1 << 34


def _send(stream, header: dict, arrays=()) -> None:
    arrays = [np.ascontiguousarray(a) for a in arrays]
    meta = [{"dtype": a.dtype.name, "shape": list(a.shape)} for a in arrays]
    stream.write((json.dumps({**header, "arrays": meta}) + "\n").encode("utf-8"))
    for a in arrays:
        stream.write(a.tobytes())
    stream.flush()


def _read(stream, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise ValueError(f"stream ended after {len(data)} of {n} bytes")
    return data


def _receive(stream) -> Tuple[Optional[dict], List[np.ndarray]]:
    line = stream.readline(1 << 20)
    if not line:
        return None, []
    header = json.loads(line.decode("utf-8"))
    out = []
    for m in header.pop("arrays", []):
        if m.get("dtype") not in _DTYPES or not all(isinstance(d, int) and d >= 0 for d in m.get("shape", [None])):
            raise ValueError(f"bad array header {m!r}")
        dtype, shape = np.dtype(m["dtype"]), tuple(m["shape"])
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes > _MAX_BYTES:
            raise ValueError(f"array of {nbytes} bytes announced")
        out.append(np.frombuffer(_read(stream, nbytes), dtype).reshape(shape).copy())
    return header, out


class LiteProcess:
    """One child process holding Lite; ``open`` and ``convert`` mirror the in-process calls."""

    def __init__(self, prefer: Optional[str] = None, home: Optional[str] = None):
        from .lite import HOME_ENV
        self.log = tempfile.TemporaryFile()
        package = __name__.rsplit(".", 1)[0]
        env = dict(os.environ, **({HOME_ENV: home} if home else {}))
        env.setdefault("GLOG_v", "3")  # Lite's warnings off; its errors stay in the log quoted on failure
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, json.dumps(sys.path), package],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env)
        self.call("binding", prefer=prefer)

    def _errors(self) -> str:
        """Lite's own ERROR lines from the child's log (the converter gives its reason there)."""
        self.log.seek(0)
        text = self.log.read()[-(1 << 16):].decode("utf-8", "replace")
        lines = [ln.split("] ", 2)[-1].strip() for ln in text.splitlines() if "ERROR" in ln]
        return "; ".join(dict.fromkeys(ln for ln in lines if ln))[:600]

    def call(self, op: str, arrays=(), **kw) -> Tuple[dict, List[np.ndarray]]:
        try:
            _send(self.proc.stdin, {"op": op, **kw}, arrays)
            reply, outs = _receive(self.proc.stdout)
        except (OSError, ValueError) as exc:
            reply, outs = None, []
            reason = str(exc)
        else:
            reason = "it exited"
        if reply is None:
            code = self.proc.poll()
            raise RuntimeError(f"the Lite process failed ({reason}; exit code {code}) {self._errors()}".strip())
        if not reply.get("ok"):
            kinds: dict = {"BackendUnavailable": BackendUnavailable, "ExportError": ExportError}
            kind = kinds.get(str(reply.get("kind")), RuntimeError)
            detail = self._errors()
            raise kind(reply["error"] + (f" [Lite: {detail}]" if detail and kind is RuntimeError else ""))
        return reply, outs

    def open(self, path: str, **kw) -> Tuple[Callable[[List[np.ndarray]], List[np.ndarray]], dict]:
        reply, _ = self.call("open", path=path, **kw)
        model = reply["model"]

        def run(xs: List[np.ndarray]) -> List[np.ndarray]:
            return self.call("run", xs, model=model)[1]
        return run, {**reply["info"], "process": "own"}

    def convert(self, onnx_path: str, output_base: str, config_file: str = "", target: str = "cpu") -> str:
        return self.call("convert", onnx_path=onnx_path, output_base=output_base, config_file=config_file,
                         target=target)[0]["path"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.log.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def serve() -> None:
    """The child's loop: Lite's own stdout output goes to stderr, replies to the original stdout. The
    child is Lite's alone, so its threads are pinned to one core (lite.lite_context)."""
    from . import lite
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    mslite, runs = None, []
    while True:
        try:
            req, arrays = _receive(requests)
        except Exception as exc:  # a malformed request ends the child with the reason
            _send(replies, {"ok": False, "error": f"bad request ({exc})"})
            return
        if req is None:
            return
        try:
            op, outs = req["op"], []
            reply: dict = {"ok": True}
            if op == "binding":
                mslite = lite.binding(req.get("prefer"))
            elif op == "open":
                run, info = lite.open_session(mslite, req["path"], req.get("target", "cpu"), req.get("device_id", 0),
                                              req.get("precision_mode"), req.get("threads", 1), pin=True)
                runs.append(run)
                reply.update(model=len(runs) - 1, info=info)
            elif op == "run":
                outs = runs[int(req["model"])](arrays)
            elif op == "version":
                reply["version"] = lite.binding_version(mslite)
            elif op == "convert":
                reply["path"] = lite.convert(mslite, req["onnx_path"], req["output_base"], req.get("config_file", ""),
                                             req.get("target", "cpu"))
            else:
                raise ValueError(f"unknown request {op!r}")
        except Exception as exc:
            _send(replies, {"ok": False, "error": str(exc), "kind": type(exc).__name__})
            continue
        _send(replies, reply, outs)
