"""`msrl lite install|status`: MindSpore Lite's runtime for any Python 3.10-3.12 on x86_64 Linux.

PyPI's only Lite (``mindspore-lite==2.0.0``) is one CPython 3.7 wheel; its Python module imports
on 3.7 only, its C++ libraries load anywhere. ``install`` fetches that wheel with pip by name (or
takes ``--wheel FILE``), keeps its libraries and headers, compiles msrl's C shim
(msrl_consistent/native/lite_shim.cc) against them with the system C++ compiler, converts and runs
a tiny model through it in a process of its own, and only then writes ``install.json``, the record
the deploy package (deploy/lite.py) reads, also inside an export bundle without msrl. Everything
is staged beside the target and renamed into place, so a failed install leaves the previous one.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import Optional

import numpy as np

from .deploy import file_sha256, lite
from .deploy.errors import ExportError

WHEEL = f"mindspore-lite=={lite.LITE_VERSION}"
PIP_TARGET = ["--python-version", "3.7", "--implementation", "cp", "--abi", "cp37m",
              "--platform", "manylinux1_x86_64", "--only-binary=:all:", "--no-deps"]
ROOT = f"lite-{lite.LITE_VERSION}"
SHIM_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native", "lite_shim.cc")
KEEP = ("mindspore_lite/lib/", "mindspore_lite/include/", "mindspore_lite/version.py", "mindspore_lite/.commit_id")
SKIP = ("_c_lite_wrapper",)  # the CPython 3.7 extension module: never loadable here


class LiteInstallError(ExportError):
    """What ``msrl lite install`` cannot do here, with what is missing and how to get it (exit 2)."""


def check_platform() -> None:
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        raise LiteInstallError(f"{WHEEL} on PyPI is built for x86_64 Linux only; this is {sys.platform} "
                               f"{platform.machine()}: install Huawei's MindSpore Lite wheel for this device and Python "
                               f"instead (its mindspore_lite module is used directly)")


def find_compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx or not shutil.which(cxx):
        raise LiteInstallError("no C++ compiler found (g++ or $CXX), needed to build msrl's Lite shim: install one "
                               "(Debian/Ubuntu: apt-get install g++; Fedora/RHEL: dnf install gcc-c++)")
    return cxx


def fetch_wheel(dest: str) -> str:
    cmd = [sys.executable, "-m", "pip", "download", WHEEL, *PIP_TARGET, "--disable-pip-version-check", "-d", dest]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = [f for f in os.listdir(dest) if f.endswith(".whl")]
    if proc.returncode != 0 or len(wheels) != 1:
        last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise LiteInstallError(f"pip could not fetch {WHEEL} ({last[0][:300]}); check the package index is reachable, "
                               f"or download the wheel elsewhere and pass --wheel FILE")
    return os.path.join(dest, wheels[0])


def extract(wheel: str, dest: str) -> int:
    """The wheel's libraries, headers and version into ``dest``; returns the bytes written."""
    total = 0
    try:
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if n.startswith(KEEP) and not any(s in n for s in SKIP)
                     and not n.endswith("/")]
            if not any(n.endswith("libmindspore-extendrt_python.so") for n in names):
                raise LiteInstallError(f"{wheel}: not a MindSpore Lite {lite.LITE_VERSION} wheel (no "
                                       f"libmindspore-extendrt_python.so)")
            for n in names:
                if n.startswith("/") or ".." in n.split("/"):
                    raise LiteInstallError(f"{wheel}: member {n!r} leads outside the install directory")
                z.extract(n, dest)
                total += z.getinfo(n).file_size
    except (zipfile.BadZipFile, OSError) as exc:
        raise LiteInstallError(f"{wheel}: cannot be read as a wheel ({exc})") from None
    return total


def compile_shim(cxx: str, root: str) -> str:
    base = os.path.join(root, "mindspore_lite")
    out = os.path.join(base, "lib", lite.SHIM)
    cmd = [cxx, "-std=c++17", "-O2", "-Wall", "-shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=0", "-I", base, SHIM_SOURCE,
           "-o", out, "-L", os.path.join(base, "lib"), "-lmindspore-extendrt_python", "-lmindspore_converter",
           "-Wl,-rpath,$ORIGIN", "-Wl,--disable-new-dtags"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [ln for ln in proc.stderr.splitlines() if "error" in ln] or proc.stderr.splitlines()[-1:]
        raise LiteInstallError(f"{cxx} could not build the Lite shim: {(errors or ['no output'])[0][:300]}")
    return out


def tiny_onnx(path: str) -> tuple:
    """A two-node ONNX model (MatMul, Tanh) with a dynamic batch, and its weight."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = (np.arange(12, dtype=np.float32).reshape(4, 3) - 6) / 10
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["z"]), helper.make_node("Tanh", ["z"], ["y"])], "self_check",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return w


def self_check(home: str, workdir: str) -> dict:
    """Convert and run a tiny model through the shim in a process of its own: the install works."""
    from .deploy.lite_process import LiteProcess
    w = tiny_onnx(os.path.join(workdir, "self_check.onnx"))
    proc = LiteProcess(prefer="shim", home=home)
    try:
        t0 = time.perf_counter()
        model = proc.convert(os.path.join(workdir, "self_check.onnx"), os.path.join(workdir, "self_check"))
        seconds = time.perf_counter() - t0
        run, info = proc.open(model)
        err = 0.0
        for b in (1, 5):
            x = np.random.default_rng(b).standard_normal((b, 4)).astype(np.float32)
            y = run([x])[0]
            err = max(err, float(np.abs(y - np.tanh(x @ w)).max()))
    finally:
        proc.close()
    if err > 1e-5:
        raise LiteInstallError(f"the installed Lite runs but computes wrongly (max error {err:.3g} on the self-check)")
    return {"convert_seconds": round(seconds, 3), "max_abs_error": err, "batches": [1, 5]}


def _current(home: str) -> Optional[dict]:
    """The record of a complete install of this Lite and this shim source, or None."""
    try:
        record = lite.read_record(home)
    except ExportError:
        return None
    if not record or record.get("lite_version") != lite.LITE_VERSION or record.get("shim_abi") != lite.SHIM_ABI:
        return None
    shim = os.path.join(home, record["shim"])
    if not os.path.isfile(shim) or record.get("shim_source_sha256") != file_sha256(SHIM_SOURCE):
        return None
    return record


def install(home: Optional[str] = None, wheel: Optional[str] = None, force: bool = False) -> dict:
    """Install (or find installed) Lite and the shim in ``home``; returns the install record."""
    home = lite.lite_home(home)
    if not force and (record := _current(home)) is not None:
        return {**record, "already_installed": True}
    check_platform()
    cxx = find_compiler()
    if wheel is not None and not os.path.isfile(wheel):
        raise LiteInstallError(f"--wheel {wheel}: no such file")
    os.makedirs(home, exist_ok=True)
    t0 = time.perf_counter()
    staging = tempfile.mkdtemp(prefix=".staging-", dir=home)
    try:
        wheel = wheel or fetch_wheel(staging)
        root = os.path.join(staging, ROOT)
        size = extract(wheel, root)
        shim = compile_shim(cxx, root)
        rel = os.path.relpath(shim, staging)
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
        record = {"lite_version": lite.LITE_VERSION, "wheel": os.path.basename(wheel), "wheel_sha256": file_sha256(wheel),
                  "shim": rel, "shim_abi": lite.SHIM_ABI, "shim_sha256": file_sha256(shim),
                  "shim_source_sha256": file_sha256(SHIM_SOURCE), "compiler": (version or [cxx])[0],
                  "python": platform.python_version(), "disk_bytes": size + os.path.getsize(shim)}
        with open(os.path.join(staging, lite.RECORD), "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        record["self_check"] = self_check(staging, staging)
        record["install_seconds"] = round(time.perf_counter() - t0, 1)
        record["installed"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        old = os.path.join(home, ROOT)
        if os.path.exists(old):
            shutil.rmtree(old)
        os.replace(root, old)
        tmp = os.path.join(home, lite.RECORD + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=2)
        os.replace(tmp, os.path.join(home, lite.RECORD))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return record


def status(home: Optional[str] = None) -> dict:
    """What is installed where, and whether it loads (in a process of its own)."""
    import importlib.util
    home = lite.lite_home(home)
    out: dict = {"home": home, "python_module": importlib.util.find_spec("mindspore_lite") is not None}
    try:
        record = lite.read_record(home)
    except ExportError as exc:
        return {**out, "installed": False, "problem": str(exc)}
    if record is None:
        return {**out, "installed": False}
    out.update(installed=True, record=record, current=_current(home) is not None)
    from .deploy.lite_process import LiteProcess
    try:
        LiteProcess(prefer="shim", home=home).close()
        out["loads"] = True
    except (ExportError, RuntimeError) as exc:
        out.update(loads=False, problem=str(exc))
    return out


def cmd_lite(args) -> int:
    if args.lite_command == "install":
        r = install(args.home, args.wheel, args.force)
        if args.json:
            print(json.dumps(r))
        elif r.get("already_installed"):
            print(f"msrl lite: MindSpore Lite {r['lite_version']} and its shim are already installed in "
                  f"{lite.lite_home(args.home)} (--force reinstalls)")
        else:
            print(f"msrl lite: installed MindSpore Lite {r['lite_version']} in {lite.lite_home(args.home)} "
                  f"({r['disk_bytes'] / 2**20:.0f} MiB, {r['install_seconds']:.0f} s); shim built with {r['compiler']}; "
                  f"self-check: converted in {r['self_check']['convert_seconds']:.2f} s, max error "
                  f"{r['self_check']['max_abs_error']:.2g}")
        return 0
    s = status(args.home)
    if args.json:
        print(json.dumps(s))
    elif not s["installed"]:
        print(f"msrl lite: nothing installed in {s['home']}{' (' + s['problem'] + ')' if 'problem' in s else ''}; "
              f"python module mindspore_lite: {'yes' if s['python_module'] else 'no'}; install with `msrl lite install`")
    else:
        r = s["record"]
        print(f"msrl lite: MindSpore Lite {r['lite_version']} in {s['home']} (installed {r.get('installed')}, "
              f"{r.get('disk_bytes', 0) / 2**20:.0f} MiB); shim {r['shim']} "
              f"{'loads' if s['loads'] else 'does not load: ' + s.get('problem', '')}"
              f"{'' if s['current'] else '; built from another shim source: run msrl lite install --force'}; "
              f"python module mindspore_lite: {'yes' if s['python_module'] else 'no'}")
    return 0 if s["installed"] and s.get("loads") else 1


def add_parser(sub) -> None:
    p = sub.add_parser("lite", help="install MindSpore Lite's runtime (the lite backend) or show what is installed")
    lsub = p.add_subparsers(dest="lite_command", required=True)
    i = lsub.add_parser("install", help=f"fetch {WHEEL} with pip, build msrl's shim, check it; idempotent")
    i.add_argument("--wheel", help="a downloaded mindspore_lite-2.0.0 wheel instead of fetching it")
    i.add_argument("--force", action="store_true", help="reinstall over a complete install")
    s = lsub.add_parser("status", help="what is installed where, and whether it loads")
    for q in (i, s):
        q.add_argument("--home", help=f"install directory (default ${lite.HOME_ENV} or {lite.default_home()})")
        q.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_lite)
