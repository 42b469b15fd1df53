"""Broken and hostile export directories: every command that reads an export refuses
them with one `msrl: error:` line naming the file, exit 2; never a traceback, never a read
outside the directory. Exit 1 stays "loads fine, acts differently"."""
import io
import json
import os
import shutil
import zipfile

import numpy as np
import pytest
from helpers import OPENED, recording_opens

from msrl_consistent import deploy
from msrl_consistent.cli import main
from msrl_consistent.manifest import IntegrityError
from msrl_consistent.runtime import load_policy


def rehash(d):
    """Update the manifest's sha256 of every listed file that is present (the 'edited by hand' case)."""
    path = os.path.join(d, "manifest.json")
    m = json.loads(open(path).read())
    for name in list(m.get("files", {})):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            m["files"][name] = deploy.file_sha256(p)
    open(path, "w").write(json.dumps(m))
    return m


def edit_manifest(d, fn):
    path = os.path.join(d, "manifest.json")
    m = json.loads(open(path).read())
    fn(m)
    open(path, "w").write(json.dumps(m))


def write_npz(path, **arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    if os.path.exists(path):
        os.chmod(path, 0o644)
    open(path, "wb").write(buf.getvalue())


def run_cli(capsys, *argv):
    with recording_opens():
        rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_refused(rc, err, *words):
    assert rc == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("msrl: error:"), err
    for w in words:
        assert w in lines[0], lines[0]


@pytest.fixture(scope="module")
def small_export(cartpole_run, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("hostile") / "base")
    assert main(["export", cartpole_run, "--out", out, "--format", "mindir,onnx", "--golden", "64"]) == 0
    return out


@pytest.fixture
def copy(small_export, tmp_path):
    d = str(tmp_path / "e")
    shutil.copytree(small_export, d)
    for name in os.listdir(d):
        os.chmod(os.path.join(d, name), 0o644)
    return d


def truncate(path, n):
    data = open(path, "rb").read()[:n]
    open(path, "wb").write(data)


def test_truncated_onnx(copy, capsys):
    truncate(os.path.join(copy, "actor.onnx"), 500)
    rehash(copy)
    rc, _, err = run_cli(capsys, "verify", copy, "--backend", "onnxruntime", "--episodes", "0")
    assert_refused(rc, err, "actor.onnx", "cannot load")


def test_truncated_mindir(copy, capsys):
    path = os.path.join(copy, "actor.mindir")
    truncate(path, os.path.getsize(path) // 2)
    rehash(copy)
    rc, _, err = run_cli(capsys, "verify", copy, "--episodes", "0")
    assert_refused(rc, err, "actor.mindir", "cannot load")


def test_golden_wrong_width(copy, capsys):
    g = os.path.join(copy, "golden.npz")
    with np.load(g) as z:
        obs, act = z["obs"], z["actions"]
    write_npz(g, obs=np.concatenate([obs, obs[:, :1]], axis=1), actions=act)
    rehash(copy)
    rc, _, err = run_cli(capsys, "verify", copy, "--episodes", "0")
    assert_refused(rc, err, "golden.npz", "shape")


def test_golden_object_array(copy, capsys):
    g = os.path.join(copy, "golden.npz")
    with np.load(g) as z:
        act = z["actions"]
    obj = np.empty((64, 4), dtype=object)
    obj[:] = 0.0
    write_npz(g, obs=obj, actions=act)
    rehash(copy)
    rc, _, err = run_cli(capsys, "verify", copy, "--episodes", "0")
    assert_refused(rc, err, "golden.npz", "dtype object")


def test_manifest_width_changed_consistently(copy, capsys):
    def widen(m):
        m["io"]["input"]["shape"][1] = 5
        o = m["spaces"]["observation"]
        o["shape"] = [5]
        o["low"].append(-1.0)
        o["high"].append(1.0)
    edit_manifest(copy, widen)
    rc, _, err = run_cli(capsys, "verify", copy, "--episodes", "0")
    assert_refused(rc, err, "golden.npz", "shape")
    # with a golden set of width 5 too, the model is what disagrees with the manifest
    g = os.path.join(copy, "golden.npz")
    with np.load(g) as z:
        obs, act = z["obs"], z["actions"]
    write_npz(g, obs=np.concatenate([obs, obs[:, :1]], axis=1), actions=act)
    rehash(copy)
    for backend in ("mindspore", "onnxruntime"):
        rc, _, err = run_cli(capsys, "verify", copy, "--backend", backend, "--episodes", "0")
        assert_refused(rc, err, "actor.", ", 5]")


@pytest.mark.parametrize("name", ["../../../../etc/hostname", "/etc/hostname", "sub/../../x", "..", ""])
def test_traversal_name_refused_and_never_read(copy, tmp_path, capsys, name):
    secret = tmp_path / "outside" / "secret"
    secret.parent.mkdir()
    secret.write_text("not yours\n")
    target = str(secret) if name.startswith("/") else name

    def add(m):
        m["files"][target] = deploy.file_sha256(str(secret))
    edit_manifest(copy, add)
    for argv in (["verify", copy, "--episodes", "0"], ["eval", copy, "--episodes", "1"]):
        rc, _, err = run_cli(capsys, *argv)
        assert_refused(rc, err, "not a plain file name")
        assert not [p for p in OPENED if "hostname" in p or "secret" in p], OPENED


def test_link_leading_out_refused(copy, tmp_path, capsys):
    outside = tmp_path / "elsewhere.onnx"
    shutil.copyfile(os.path.join(copy, "actor.onnx"), outside)
    os.remove(os.path.join(copy, "actor.onnx"))
    os.symlink(outside, os.path.join(copy, "actor.onnx"))
    rc, _, err = run_cli(capsys, "verify", copy, "--backend", "onnxruntime", "--episodes", "0")
    assert_refused(rc, err, "actor.onnx", "link leading out")
    assert str(outside) not in OPENED


def test_every_reader_refuses_the_same_directory(copy, tmp_path, capsys):
    truncate(os.path.join(copy, "actor.onnx"), 500)
    rehash(copy)
    rc, _, err = run_cli(capsys, "eval", copy, "--backend", "onnxruntime", "--episodes", "1")
    assert_refused(rc, err, "actor.onnx")
    trace = tmp_path / "t.npz"
    trace.write_bytes(b"")
    rc, _, err = run_cli(capsys, "replay", copy, str(trace), "--against", "onnxruntime")
    assert_refused(rc, err, "actor.onnx")
    with pytest.raises(deploy.ExportError, match="actor.onnx"):
        load_policy(copy, backend="onnxruntime")
    assert deploy.main(["check", "--dir", copy, "--backend", "onnxruntime"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "actor.onnx" in err and "Traceback" not in err
    # the manifest-level refusal is the same for every reader
    edit_manifest(copy, lambda m: m["files"].update({"../x": "0" * 64}))
    with pytest.raises(IntegrityError):
        from msrl_consistent.manifest import read_manifest
        read_manifest(copy)
    with pytest.raises(deploy.ExportError, match="not a plain file name"):
        deploy.load(copy, backend="onnxruntime")


def test_hostile_npz_header_allocates_nothing(copy, capsys):
    import tracemalloc
    g = os.path.join(copy, "golden.npz")
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (64, 10**9)})
    with zipfile.ZipFile(g, "w") as z:
        z.writestr("obs.npy", buf.getvalue() + b"\0" * 64)
        z.writestr("actions.npy", buf.getvalue())
    rehash(copy)
    tracemalloc.start()
    rc, _, err = run_cli(capsys, "verify", copy, "--backend", "onnxruntime", "--episodes", "0")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert_refused(rc, err, "golden.npz")
    assert peak < 64 << 20


def test_acts_differently_is_still_exit_1(copy, capsys):
    g = os.path.join(copy, "golden.npz")
    with np.load(g) as z:
        obs, act = z["obs"], z["actions"]
    write_npz(g, obs=obs, actions=(1 - act).astype(np.int32))
    rehash(copy)
    rc, out, err = run_cli(capsys, "verify", copy, "--backend", "onnxruntime", "--episodes", "0")
    assert rc == 1 and "Traceback" not in err and "FAIL" in out


def test_deploy_schema_matches_the_manifest_dataclass():
    # the deploy package (the standalone validator shipped in every export) and manifest.Manifest must accept the same fields
    import dataclasses

    from msrl_consistent import manifest as mf

    def names(cls):
        return {f.name + ("" if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING else "?")
                for f in dataclasses.fields(cls)}
    assert names(mf.Manifest) == set(deploy.SCHEMA)
    assert names(mf.Source) == set(deploy.SCHEMA["source"])
    assert names(mf.ExportInfo) == set(deploy.SCHEMA["export"])
    assert names(mf.GoldenInfo) == set(deploy.SCHEMA["golden"])
