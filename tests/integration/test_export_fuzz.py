"""Mutation fuzzer of export directories, seeded and bounded.

From a valid small export (PPO Pendulum: observation normalization, continuous actions), every
file is truncated, flipped, emptied, swapped, deleted; every manifest field gets values of other
types and ranges, or is removed; traversal names, links and huge declared shapes are added.
Each variant runs in-process through ``msrl verify`` (backends alternating) and must end in
exit 0, 1 or 2 with no traceback and, on 2, exactly one `msrl: error:` line; a sentinel file
outside the directory is never opened; huge declared shapes allocate nothing. Exit 0 is
accepted only where the variant's policy acts exactly like the original (so the change could
not alter the policy's outputs). Every 5th variant also goes through ``msrl eval``,
``load_policy`` and the bundle's ``check``: where verify refuses (2), they refuse too, and
where verify accepts the directory, check accepts it too.
"""
import collections
import io
import json
import os
import shutil
import tracemalloc
import zipfile

import numpy as np
import pytest
from helpers import OPENED, recording_opens

from msrl_consistent import deploy
from msrl_consistent.cli import main
from msrl_consistent.runtime import load_policy

SEED = 16
FILES = ("actor.mindir", "actor.onnx", "golden.npz", "policy.py", "msrl_deploy.zip", "manifest.json")


def _rehash(d):
    path = os.path.join(d, "manifest.json")
    try:
        m = json.loads(open(path).read())
        for name in list(m["files"]):
            p = os.path.join(d, name)
            if deploy.plain_name(name) and os.path.isfile(p) and not os.path.islink(p):
                m["files"][name] = deploy.file_sha256(p)
        open(path, "w").write(json.dumps(m))
    except Exception:
        pass


def _paths(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list) and len(obj) <= 8:
        for i, v in enumerate(obj):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def _set(m, path, value, delete=False):
    cur = m
    for p in path[:-1]:
        cur = cur[p]
    if delete:
        if isinstance(cur, dict):
            del cur[path[-1]]
        else:
            cur.pop(path[-1])
    else:
        cur[path[-1]] = value


REPLACEMENTS = [None, "x", "dynamic", 0, -1, 1, 2 ** 40, 1.5, True, [], {}, [1], "inf", float("nan")]


def _huge_npz(path, shape):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("obs.npy", buf.getvalue() + b"\0" * 128)
        z.writestr("actions.npy", buf.getvalue() + b"\0" * 128)


def build_variants(base, rng, sentinel):  # noqa: C901  (a table of mutation families)
    """(label, family, mutate(d), must_fail, memory_bound)"""
    sizes = {f: os.path.getsize(os.path.join(base, f)) for f in FILES}
    out = []

    def file_op(f, op, arg=None, rehash=True, must_fail=False):
        def mutate(d):
            p = os.path.join(d, f)
            data = open(p, "rb").read()
            if op == "truncate":
                data = data[:arg]
            elif op == "flip":
                data = bytearray(data)
                data[arg] ^= 0xFF
                data = bytes(data)
            elif op == "swap":
                data = open(os.path.join(d, arg), "rb").read()
            elif op == "append":
                data = data + b"\0garbage" * 8
            if op == "delete":
                os.remove(p)
            else:
                open(p, "wb").write(data)
            if rehash and f != "manifest.json":
                _rehash(d)
        return (f"{f}:{op}:{arg}:{'rehash' if rehash else 'stale'}", "file", mutate, must_fail, None)

    for f in FILES:
        n = sizes[f]
        for k in sorted({0, 1, 100, 500, n // 2, n - 1}):
            # a truncated file the chosen backend needs can never pass
            needed = {"actor.mindir": "mindspore", "actor.onnx": "onnxruntime"}.get(f, f in ("golden.npz", "manifest.json"))
            out.append(file_op(f, "truncate", k, must_fail=needed if k < n // 2 + 1 else False))
        for off in rng.choice(n, size=5, replace=False):
            out.append(file_op(f, "flip", int(off)))
        for g in FILES:
            if g != f:
                out.append(file_op(f, "swap", g))
        out.append(file_op(f, "append"))
        out.append(file_op(f, "delete", must_fail=True))
        if f != "manifest.json":
            out.append(file_op(f, "flip", int(rng.integers(n)), rehash=False, must_fail=True))

    m0 = json.loads(open(os.path.join(base, "manifest.json")).read())
    paths = list(_paths(m0))
    noisy = [p for p in paths if p[0] in ("source", "versions") and len(p) > 2]
    core = [p for p in paths if p not in noisy]
    picked = core + [noisy[i] for i in rng.choice(len(noisy), size=min(8, len(noisy)), replace=False)]
    for path in picked:
        for value in [REPLACEMENTS[i] for i in rng.choice(len(REPLACEMENTS), size=3, replace=False)] + ["<delete>"]:
            def mutate(d, path=path, value=value):
                p = os.path.join(d, "manifest.json")
                m = json.loads(open(p).read())
                _set(m, path, value, delete=value == "<delete>")
                open(p, "w").write(json.dumps(m))
            out.append((f"manifest:{'.'.join(map(str, path))}={value!r}", "field", mutate, False, None))

    secret_hash = deploy.file_sha256(sentinel)
    for name in ["../secret", "../../secret", sentinel, "a/../../secret", "..", ".", "", "x\x00y", "sub/",
                 "..\\secret", os.path.relpath(sentinel, base)]:
        def mutate(d, name=name):
            p = os.path.join(d, "manifest.json")
            m = json.loads(open(p).read())
            m["files"][name] = secret_hash
            open(p, "w").write(json.dumps(m))
        out.append((f"traversal:{name!r}", "traversal", mutate, True, None))
    for f in FILES:
        def mutate(d, f=f):
            outside = os.path.join(os.path.dirname(sentinel), "link-target-" + f)
            shutil.copyfile(os.path.join(d, f), outside)
            os.remove(os.path.join(d, f))
            os.symlink(outside, os.path.join(d, f))
        out.append((f"link-out:{f}", "link", mutate, True, None))

    def link_inside(d):
        os.rename(os.path.join(d, "actor.onnx"), os.path.join(d, "actor-real.onnx"))
        os.symlink("actor-real.onnx", os.path.join(d, "actor.onnx"))
    out.append(("link-inside:actor.onnx", "link", link_inside, False, None))

    def set_field(path, value, npz_shape=None):
        def mutate(d):
            p = os.path.join(d, "manifest.json")
            m = json.loads(open(p).read())
            _set(m, path, value)
            open(p, "w").write(json.dumps(m))
            if npz_shape is not None:
                _huge_npz(os.path.join(d, "golden.npz"), npz_shape)
                _rehash(d)
        return mutate
    huge = [(("golden", "count"), 10 ** 9, None), (("golden", "count"), 2 ** 22, None),
            (("spaces", "observation", "shape"), [10 ** 9], None), (("spaces", "observation", "shape"), [65536, 65536], None),
            (("spaces", "action", "shape"), [10 ** 9], None), (("export", "batch"), 10 ** 9, None),
            (("export", "golden_batch"), 10 ** 9, None), (("golden", "count"), 32, (32, 10 ** 9)),
            (("golden", "count"), 10 ** 7, (10 ** 7, 3)), (("golden", "count"), 32, (2 ** 40, 3))]
    for path, value, shape in huge:
        out.append((f"huge:{'.'.join(path)}={value}:npz={shape}", "huge", set_field(path, value, shape), True, 64 << 20))
    return out


@pytest.fixture(scope="module")
def fuzz_base(pendulum_run, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("fuzz") / "base")
    assert main(["export", pendulum_run, "--out", out, "--format", "mindir,onnx", "--golden", "32"]) == 0
    for name in os.listdir(out):
        os.chmod(os.path.join(out, name), 0o644)
    for name in os.listdir(out):
        if name.startswith("report-"):
            os.remove(os.path.join(out, name))
    return out


def _one_line_error(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return len(lines) == 1 and lines[0].startswith("msrl: error:")


@pytest.mark.slow
def test_mutation_fuzzer(fuzz_base, tmp_path, capsys):  # noqa: C901  (one assertion per outcome family)
    rng = np.random.default_rng(SEED)
    sentinel_dir = tmp_path / "outside"
    sentinel_dir.mkdir()
    sentinel = str(sentinel_dir / "secret")
    open(sentinel, "w").write("secret\n")
    with np.load(os.path.join(fuzz_base, "golden.npz")) as z:
        g_obs, g_act = z["obs"], z["actions"]
    variants = build_variants(fuzz_base, rng, sentinel)
    codes = collections.Counter()
    by_family = collections.defaultdict(collections.Counter)
    failures = []
    for i, (label, family, mutate, must_fail, mem_bound) in enumerate(variants):
        d = str(tmp_path / f"v{i}")
        shutil.copytree(fuzz_base, d, symlinks=True)
        mutate(d)
        backend = ("onnxruntime", "mindspore")[i % 2]
        if mem_bound:
            tracemalloc.start()
        with recording_opens():
            rc = main(["verify", d, "--backend", backend, "--episodes", "0", "--json"])
        if mem_bound:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            if peak > mem_bound:
                failures.append(f"{label}: peak {peak} bytes")
        out, err = capsys.readouterr()
        codes[rc] += 1
        by_family[family][rc] += 1
        problems = []
        if rc not in (0, 1, 2):
            problems.append(f"exit {rc}")
        if "Traceback" in err or "Traceback" in out:
            problems.append("traceback")
        if rc == 2 and not _one_line_error(err):
            problems.append(f"stderr not one line: {err!r}")
        if rc == 0 and (must_fail is True or must_fail == backend):
            problems.append("passed although it must not")
        if any(os.path.abspath(p).startswith(str(sentinel_dir)) for p in OPENED):
            problems.append("read outside the export directory")
        if rc == 0:
            try:
                pol = load_policy(d, backend=backend)
                pred = pol.act_at_batch(g_obs, 1)
                atol = 0.0 if backend == "mindspore" else 1e-5
                if not np.abs(pred.astype(np.float64) - g_act).max() <= atol:
                    problems.append("exit 0 but the policy acts differently from the original")
            except Exception as exc:  # noqa: BLE001 - any failure here is a finding
                problems.append(f"exit 0 but load_policy fails: {type(exc).__name__}: {exc}")
        if i % 5 == 0:
            rc_eval = main(["eval", d, "--backend", backend, "--episodes", "1"])
            _, err_e = capsys.readouterr()
            rc_check = deploy.main(["check", "--dir", d, "--backend", backend, "--latency-seconds", "0"])
            _, err_c = capsys.readouterr()
            if "Traceback" in err_e + err_c:
                problems.append("traceback in eval/check")
            if rc == 2 and (rc_eval != 2 or rc_check != 2):
                problems.append(f"verify refused but eval -> {rc_eval}, check -> {rc_check}")
            if rc in (0, 1) and rc_check == 2:
                problems.append(f"verify accepted (exit {rc}) but check refused: {err_c.strip()}")
            if rc == 2:
                try:
                    load_policy(d, backend=backend)
                    problems.append("verify refused but load_policy loads it")
                except (deploy.ExportError, Exception) as exc:  # noqa: BLE001
                    if not isinstance(exc, (deploy.ExportError, ValueError)) and "ConfigError" not in type(exc).__name__:
                        problems.append(f"load_policy raised {type(exc).__name__}: {exc}")
        if problems:
            failures.append(f"{label} [{backend}] rc={rc}: {'; '.join(problems)} | {err.strip()[:200]}")
        shutil.rmtree(d, ignore_errors=True)
    summary = {"variants": len(variants), "exit_codes": dict(sorted(codes.items())),
               "by_family": {k: dict(sorted(v.items())) for k, v in by_family.items()}}
    print(json.dumps(summary))
    with capsys.disabled():
        print(f"\nexport fuzzer: {json.dumps(summary)}")
    assert not failures, "\n".join(failures[:40])
    assert len(variants) >= 300
