"""Helpers shared by the test modules (import them as ``from helpers import ...``)."""
import contextlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")


def train_run(tmp_root, config, overrides, name):
    """Train through the public API into tmp_root/name; returns (run_dir, summary)."""
    from msrl_consistent import registry
    from msrl_consistent.checkpoint import atomic_write_text
    from msrl_consistent.config import dump_config, load_config

    cfg = load_config(os.path.join(CONFIGS, config), overrides)
    run_dir = os.path.join(str(tmp_root), name)
    os.makedirs(run_dir, exist_ok=True)
    atomic_write_text(os.path.join(run_dir, "config.yaml"), dump_config(cfg))
    algo = registry.get(cfg.algorithm)(cfg)
    summary = algo.learn(run_dir, progress=False)
    return run_dir, summary, algo


def export_without_head(monkeypatch, run_dir, out_dir, **kwargs):
    """``export_run`` with the action head left out of the written model (raw network output: the
    forgotten-post-processing bug), while the golden set keeps the training cell's actions."""
    from mindspore import nn

    from msrl_consistent.export import exporter, writers
    from msrl_consistent.networks.heads import PolicyCell

    class IdentityHead(nn.Cell):
        def construct(self, x):
            return x

    write = writers.write_mindir
    monkeypatch.setattr(writers, "write_mindir",
                        lambda cell, *a, **k: write(PolicyCell(cell.normalizer, cell.actor, IdentityHead()), *a, **k))
    return exporter.export_run(run_dir, out_dir, **kwargs)


def copy_run_at_checkpoint(run_dir, dest, checkpoint: str):
    """A copy of a finished run directory whose newest checkpoint is ``checkpoint`` (later ones
    and summary.json removed): what an interruption at that checkpoint leaves behind."""
    import shutil

    shutil.copytree(run_dir, dest)
    for f in os.listdir(os.path.join(dest, "checkpoints")):
        if f != checkpoint:
            os.unlink(os.path.join(dest, "checkpoints", f))
    os.unlink(os.path.join(dest, "summary.json"))
    return str(dest)


def hide_modules(tmp_root, *names):
    """An environment for a subprocess in which ``import NAME`` fails as if NAME were not
    installed (a package of that name raising ModuleNotFoundError, first on PYTHONPATH)."""
    hidden = os.path.join(str(tmp_root), "hidden-modules")
    for name in names:
        os.makedirs(os.path.join(hidden, name), exist_ok=True)
        with open(os.path.join(hidden, name, "__init__.py"), "w") as fh:
            fh.write(f"raise ModuleNotFoundError(\"No module named '{name}' (hidden by the test)\")\n")
    env = dict(os.environ, GLOG_v="3")
    env["PYTHONPATH"] = os.pathsep.join([hidden] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def interrupt_when(proc, ready, signum, wait_s=180, timeout=300):
    """Send ``signum`` to the process ``proc`` once ``ready()`` holds (or after ``wait_s``), then
    wait for it to exit; returns its (stdout, stderr). The process is killed if it outlives this."""
    import time
    try:
        deadline = time.time() + wait_s
        while time.time() < deadline and not ready():
            time.sleep(0.2)
        proc.send_signal(signum)
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()


def msrl(*args, cwd=None, env=None, timeout=600):
    """``python -m msrl_consistent ARGS`` in a subprocess (the installed command as a user runs it)."""
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "msrl_consistent", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, env=env or dict(os.environ, GLOG_v="3"), timeout=timeout)


OPENED: list = []
"""Paths opened (``open`` audit events) inside the last ``recording_opens()`` block."""
_RECORDING = [False]
_HOOKED = [False]


def _audit(event, args, _recording=_RECORDING, _opened=OPENED, _os=os):
    # the state and os are bound as defaults: the hook outlives the module's globals at exit
    if _recording[0] and event == "open" and args and isinstance(args[0], (str, bytes, _os.PathLike)):
        _opened.append(_os.fsdecode(args[0]))


@contextlib.contextmanager
def recording_opens():
    """Record into ``OPENED`` every file opened inside the block (an audit hook, installed once:
    hooks cannot be removed, so it records only while a block runs)."""
    if not _HOOKED[0]:
        sys.addaudithook(_audit)
        _HOOKED[0] = True
    del OPENED[:]
    _RECORDING[0] = True
    try:
        yield OPENED
    finally:
        _RECORDING[0] = False


BOARD_PACKAGES = ("numpy", "numpy.libs", "onnxruntime", "flatbuffers", "packaging", "sympy", "mpmath", "google",
                  "coloredlogs", "humanfriendly")
"""What a board has installed: numpy and onnxruntime with onnxruntime's import-time dependencies."""


def board_site(root):
    """A directory of symlinks to BOARD_PACKAGES only, for ``python -S`` with it as PYTHONPATH."""
    import numpy as np

    site = os.path.dirname(os.path.dirname(np.__file__))
    for name in BOARD_PACKAGES:
        if os.path.exists(os.path.join(site, name)):
            os.symlink(os.path.join(site, name), os.path.join(str(root), name))
    return str(root)


def board(board_path, bundle, *args, env=None):
    """``python -S policy.py ARGS`` in the bundle directory with only numpy/onnxruntime importable
    (and the Lite runtime ``msrl lite install`` put into this user's cache, found as on a board)."""
    import subprocess

    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": board_path, "HOME": os.environ.get("HOME", "/tmp"),
           **{k: v for k, v in os.environ.items() if k == "MSRL_LITE_HOME"}, **(env or {})}
    return subprocess.run([sys.executable, "-S", "policy.py", *args], cwd=bundle, env=env, capture_output=True,
                          text=True, timeout=300)


def run_doc_python(doc, section_heading, directory):
    """Every python block of the section ``section_heading`` of the Markdown file ``doc`` (a path
    relative to the repository, e.g. ``docs/recurrent.md``), verbatim, each in its own interpreter
    in ``directory`` (an export directory's copy); a failing block fails the caller.
    Returns the blocks, for the caller's checks of what they hold."""
    import subprocess

    from test_readme import fenced, section

    with open(os.path.join(ROOT, doc), encoding="utf-8") as fh:
        blocks = fenced(section(fh.read(), section_heading), "python")
    for code in blocks:
        r = subprocess.run([sys.executable, "-c", code], cwd=str(directory), capture_output=True, text=True,
                           timeout=300, env=dict(os.environ, GLOG_v="3"))
        assert r.returncode == 0, r.stderr
    return blocks


def om_behind_onnx(monkeypatch, export_dir):
    """Make ``export_dir`` hold an actor.om (a copy of its actor.onnx, listed in the manifest) and
    install a stand-in for ais_bench's InferSession that runs it with ONNX Runtime. Returns the
    list each ``infer`` call appends its feeds' [(shape, dtype name)] to."""
    import json
    import shutil
    import types

    from msrl_consistent import deploy

    shutil.copyfile(os.path.join(export_dir, "actor.onnx"), os.path.join(export_dir, "actor.om"))
    path = os.path.join(export_dir, "manifest.json")
    with open(path) as fh:
        m = json.load(fh)
    m["files"]["actor.om"] = deploy.file_sha256(os.path.join(export_dir, "actor.om"))
    m["export"]["formats"].append("om")
    with open(path, "w") as fh:
        json.dump(m, fh)
    behind, calls = deploy.make_runner(deploy.open_export(export_dir), "onnxruntime").run_all, []

    class InferSession:
        def __init__(self, device_id, path):
            pass

        def infer(self, feeds, mode="static"):
            calls.append([(f.shape, f.dtype.name) for f in feeds])
            return behind(feeds)

    interface = types.ModuleType("ais_bench.infer.interface")
    interface.InferSession = InferSession
    for name in ("ais_bench", "ais_bench.infer"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "ais_bench.infer.interface", interface)
    return calls



def member_hashes(run_dir, seeds):
    """{seed: params_sha256} of a population's members, from their summary.json."""
    from msrl_consistent.populations import member_dir

    out = {}
    for s in seeds:
        with open(os.path.join(member_dir(run_dir, s), "summary.json")) as fh:
            out[s] = json.load(fh)["params_sha256"]
    return out
