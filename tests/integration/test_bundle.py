"""Every export is a self-contained bundle (policy.py) that runs and proves itself
where it is deployed; ONNX with a symbolic batch; the guarded policy.

"No msrl, no MindSpore" is simulated with ``python -S`` (no site-packages) and a PYTHONPATH
holding symlinks to numpy and onnxruntime (plus onnxruntime's import-time dependencies) only;
the test asserts that msrl_consistent and mindspore cannot be imported there. (The manual
acceptance run used a fresh ``python -m venv`` with ``pip install numpy onnxruntime``.)
"""
import json
import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest
from helpers import board, train_run

from msrl_consistent import deploy
from msrl_consistent.cli import main
from msrl_consistent.export.exporter import export_run
from msrl_consistent.runtime import TrainCellPolicy, load_policy


@pytest.fixture(scope="module")
def bundles(cartpole_run, pendulum_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("bundles")
    sac_run, _, _ = train_run(root, "sac/Pendulum-v1.yaml",
                              ["total_timesteps=300", "algo.learning_starts=200", "eval.freq=0", "eval.episodes=1",
                               "policy.net_arch=[64, 64]", "algo.batch_size=64", "log.tensorboard=false"], "sac-run")
    out = {}
    for name, run in (("cartpole", cartpole_run), ("pendulum", pendulum_run), ("sac", sac_run)):
        out[name] = str(root / name)
        export_run(run, out[name], formats=["mindir", "onnx"], golden=128)
    return out


def copy_bundle(src, dst):
    shutil.copytree(src, dst)
    for name in os.listdir(dst):
        os.chmod(os.path.join(dst, name), 0o644)
    return str(dst)


def test_board_check_passes_without_msrl_or_mindspore(bundles, board_path, tmp_path):
    probe = subprocess.run([sys.executable, "-S", "-c", "import numpy, onnxruntime\n"
                            "for m in ('msrl_consistent', 'mindspore', 'gymnasium'):\n"
                            "    try:\n        __import__(m)\n        print('importable', m)\n"
                            "    except ImportError:\n        pass"],
                           env={"PYTHONPATH": board_path}, cwd=str(tmp_path), capture_output=True, text=True)
    assert probe.returncode == 0 and probe.stdout == "", probe.stdout + probe.stderr
    for name, src in bundles.items():
        d = copy_bundle(src, tmp_path / name)
        r = board(board_path, d, "check", "--backend", "onnxruntime", "--latency-seconds", "0.1")
        assert r.returncode == 0, (name, r.stdout, r.stderr)
        assert "PASS" in r.stdout and "latency at batch 1" in r.stdout
        rep = json.load(open(os.path.join(d, "report-check-onnxruntime.json")))
        assert rep["passed"] and rep["backend"] == "onnxruntime" and rep["latency"][0]["p99_us"] > 0


def test_bundle_entry_with_a_damaged_package_is_one_error_line(bundles, board_path, tmp_path):
    # the package ships as msrl_deploy.zip: truncated or missing, `python policy.py check` says so in
    # one line, exit 2 (the sha256 check itself lives in the package)
    for damage in ("truncate", "remove"):
        d = copy_bundle(bundles["cartpole"], tmp_path / damage)
        path = os.path.join(d, deploy.BUNDLE_PACKAGE)
        if damage == "truncate":
            with open(path, "r+b") as fh:
                fh.truncate(os.path.getsize(path) // 2)
        else:
            os.remove(path)
        r = board(board_path, d, "check", "--backend", "onnxruntime")
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("policy.py: error: msrl_deploy.zip"), r.stderr


def test_board_check_mismatch_and_corruption(bundles, board_path, tmp_path):
    # actor.onnx re-exported from other weights (the SAC bundle's net on the PPO Pendulum bundle): exit 1
    d = copy_bundle(bundles["pendulum"], tmp_path / "other-weights")
    shutil.copyfile(os.path.join(bundles["sac"], "actor.onnx"), os.path.join(d, "actor.onnx"))
    m = json.load(open(os.path.join(d, "manifest.json")))
    m["files"]["actor.onnx"] = deploy.file_sha256(os.path.join(d, "actor.onnx"))
    json.dump(m, open(os.path.join(d, "manifest.json"), "w"))
    r = board(board_path, d, "check", "--backend", "onnxruntime", "--latency-seconds", "0")
    assert r.returncode == 1 and "FAIL" in r.stdout, r.stdout + r.stderr
    # one flipped byte: exit 2 naming the file
    d = copy_bundle(bundles["cartpole"], tmp_path / "flipped")
    p = os.path.join(d, "actor.onnx")
    data = bytearray(open(p, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(p, "wb").write(bytes(data))
    r = board(board_path, d, "check", "--backend", "onnxruntime")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "actor.onnx" in r.stderr and "sha256" in r.stderr


def with_om(src, dst):
    """A bundle that also lists an actor.om (a copy of the ONNX graph: only the stand-ins run it)."""
    d = copy_bundle(src, dst)
    shutil.copyfile(os.path.join(d, "actor.onnx"), os.path.join(d, "actor.om"))
    m = json.load(open(os.path.join(d, "manifest.json")))
    m["files"]["actor.om"] = deploy.file_sha256(os.path.join(d, "actor.om"))
    m["export"]["formats"].append("om")
    json.dump(m, open(os.path.join(d, "manifest.json"), "w"))
    return d


@pytest.mark.parametrize("backend,words", [("lite", "mindspore_lite"), ("om", "ais_bench")])
def test_board_backend_missing_is_one_line(bundles, board_path, backend, words, tmp_path):
    empty = {"MSRL_LITE_HOME": str(tmp_path / "no-lite")}  # a board where nothing installed Lite
    r = board(board_path, with_om(bundles["cartpole"], tmp_path / "b"), "check", "--backend", backend, env=empty)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert words in r.stderr and "not installed" in r.stderr and "install" in r.stderr


def test_user_code_on_the_board(bundles, board_path):
    code = ("from policy import load\nimport numpy as np\npi = load('.', backend='onnxruntime')\n"
            "print(pi.act(np.zeros(4, np.float32)), pi.act(np.zeros((7, 4), np.float32)).shape)")
    env = {"PYTHONPATH": board_path}
    r = subprocess.run([sys.executable, "-S", "-c", code], cwd=bundles["cartpole"], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0 and r.stdout.split()[-1] == "(7,)", r.stderr


def test_onnx_dynamic_batch_matches_training_cell(bundles, cartpole_run, pendulum_run):
    import onnx
    for name, run in (("cartpole", cartpole_run), ("pendulum", pendulum_run)):
        d = bundles[name]
        model = onnx.load(os.path.join(d, "actor.onnx"))
        onnx.checker.check_model(model)
        assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
        assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
        assert json.load(open(os.path.join(d, "manifest.json")))["export"]["onnx"]["batch"] == "dynamic"
        ref = TrainCellPolicy(run)
        pol = load_policy(d, backend="onnxruntime")
        assert pol.fixed_batch is None
        rng = np.random.default_rng(1)
        for b in (1, 7, 256):
            x = rng.normal(0, 1, (b, ref.obs_dim)).astype(np.float32)
            got, want = pol.run_batched(x), ref.act(x)
            assert got.shape == want.shape
            if ref.spec.discrete:
                assert np.array_equal(got, want)
            else:
                assert np.abs(got - want).max() <= 1e-5


def test_fixed_batch_onnx_kept_for_atc(cartpole_run, tmp_path):
    d = str(tmp_path / "b4")
    export_run(cartpole_run, d, formats=["mindir", "onnx"], batch=4, golden=32)
    assert json.load(open(os.path.join(d, "manifest.json")))["export"]["onnx"]["batch"] == 4
    assert load_policy(d, backend="onnxruntime").act(np.zeros((7, 4), np.float32)).shape == (7,)


# -- stand-ins: Lite's Ascend target through Lite's Python module, and OM (neither runs here) -----
def _fake_lite(calls, ort_run):
    ml = types.ModuleType("mindspore_lite")

    class Ctx:
        def __init__(self):
            self.ascend = types.SimpleNamespace()
            self.cpu = types.SimpleNamespace()
            calls.append(("Context",))

    class Tensor:
        def set_data_from_numpy(self, x):
            calls.append(("set_data_from_numpy", x.shape))
            self.x = x

        def get_data_to_numpy(self):
            return self.y

    class Model:
        def build_from_file(self, path, model_type, ctx):
            calls.append(("build_from_file", os.path.basename(path), model_type, list(ctx.target),
                          vars(ctx.ascend), vars(ctx.cpu)))
            self.t = Tensor()

        def get_inputs(self):
            return [self.t]

        def resize(self, inputs, shapes):
            calls.append(("resize", shapes))

        def predict(self, inputs):
            out = Tensor()
            out.y = ort_run(inputs[0].x)
            return [out]

    ml.Context, ml.Model = Ctx, Model
    ml.ModelType = types.SimpleNamespace(MINDIR="MINDIR")
    return ml


def test_lite_ascend_target_call_sequence_with_stand_in(bundles, monkeypatch):
    """A stand-in for Lite's Python module on an Ascend board (the ONNX graph behind its API): the
    Ascend target's context (device id, explicit precision mode) reaches Lite's build call. The
    CPU target runs the real Lite in test_lite.py."""
    from msrl_consistent.deploy import lite_process
    monkeypatch.setattr(lite_process, "needs_own_process", lambda: False)  # the stand-in lives in this process
    d = bundles["cartpole"]
    ort = load_policy(d, backend="onnxruntime")
    calls = []
    monkeypatch.setitem(sys.modules, "mindspore_lite", _fake_lite(calls, ort.run_batched))
    pi = deploy.load(d, backend="lite", target="ascend", device_id=1)
    assert calls[1][:4] == ("build_from_file", "actor.mindir", "MINDIR", ["ascend"])
    assert calls[1][4] == {"device_id": 1, "precision_mode": "enforce_fp32"}  # never Lite's fp16 default
    x = np.zeros((5, 4), np.float32)
    assert np.array_equal(pi.act(x), ort.act(x))
    assert ("resize", [[5, 4]]) in calls
    r = deploy.check(d, backend="lite", latency_seconds=0, write_report=False)
    assert r["passed"] and r["runner"]["precision_mode"] == "enforce_fp32"
    with pytest.raises(deploy.ExportError, match="precision_mode"):
        deploy.load(d, backend="lite", target="ascend", precision_mode="fp16")


def test_om_call_sequence_with_stand_ins(bundles, monkeypatch, tmp_path):
    d = with_om(bundles["cartpole"], tmp_path / "om")  # the stand-in runs the ONNX graph behind the OM API
    ort = load_policy(d, backend="onnxruntime")
    calls = []

    class InferSession:
        def __init__(self, device_id, model_path):
            calls.append(("InferSession", device_id, os.path.basename(model_path)))

        def infer(self, feeds, mode="static"):
            calls.append(("infer", feeds[0].shape, mode))
            return [ort.run_batched(feeds[0])]

    interface = types.ModuleType("ais_bench.infer.interface")
    interface.InferSession = InferSession
    for name in ("ais_bench", "ais_bench.infer"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "ais_bench.infer.interface", interface)
    pi = deploy.load(d, backend="om", device_id=0)
    assert calls[0] == ("InferSession", 0, "actor.om")
    x = np.zeros((3, 4), np.float32)
    assert np.array_equal(pi.act(x), ort.act(x))
    assert all(c[1] == (1, 4) and c[2] == "static" for c in calls[1:])  # fixed batch: chunked and padded
    # aclruntime where only that is installed
    monkeypatch.setitem(sys.modules, "ais_bench.infer.interface", None)
    acl_calls = []

    class T:
        def __init__(self, x):
            self.x = x

        def to_device(self, dev):
            acl_calls.append(("to_device", dev))

        def to_host(self):
            acl_calls.append(("to_host",))

        def __array__(self, dtype=None, copy=None):
            return self.x

    class Session:
        def __init__(self, path, dev, opts):
            acl_calls.append(("InferenceSession", os.path.basename(path), dev))

        def get_outputs(self):
            return [types.SimpleNamespace(name="action")]

        def run(self, names, tensors):
            acl_calls.append(("run", names))
            return [T(ort.run_batched(tensors[0].x))]

    acl = types.ModuleType("aclruntime")
    acl.session_options = lambda: object()
    acl.InferenceSession, acl.Tensor = Session, T
    monkeypatch.setitem(sys.modules, "aclruntime", acl)
    pi = deploy.load(d, backend="om")
    assert acl_calls[0] == ("InferenceSession", "actor.om", 0)
    assert np.array_equal(pi.act(x), ort.act(x))


# -- the guarded policy ---------------------------------------------------------------------------
class Faulty:
    """Wraps a runner: NaN, out-of-range actions or an exception on planted calls."""

    def __init__(self, run, plan):
        self.inner, self.plan, self.n = run, plan, 0

    def __call__(self, x):
        self.n += 1
        fault = self.plan.get(self.n)
        out = np.array(self.inner(x), copy=True)
        if fault == "nan":
            out[...] = np.nan
        elif fault == "range":
            out[...] = 1e3
        elif fault == "raise":
            raise RuntimeError("device lost")
        return out


def test_guard_catches_planted_faults(bundles):
    d = bundles["pendulum"]
    pi = load_policy(d, backend="mindspore", guard=True)  # fallback: onnxruntime of the same bundle
    assert pi.guard.fallback.backend == "onnxruntime"
    ref = load_policy(d, backend="mindspore")
    plan = {i: k for i, k in zip(range(3, 60, 4), ["nan", "range", "raise"] * 5)}
    pi.runner.run = Faulty(pi.runner.run, plan)
    rng = np.random.default_rng(0)
    for _ in range(60):
        x = rng.normal(0, 1, 3).astype(np.float32)
        a = pi.act(x)
        assert np.isfinite(a).all() and np.abs(a - ref.act(x)).max() <= 1e-5
    s = pi.guard_stats()
    assert s["calls"] == 60 and s["fallbacks"] == len(plan)
    assert s["violations"]["nonfinite"] == 5 and s["violations"]["out_of_range"] == 5 and s["violations"]["exception"] == 5
    assert s["latency_us"]["p99"] >= s["latency_us"]["p50"] > 0
    # without a fallback: a clear error, never a NaN
    bare = deploy.load(d, backend="onnxruntime", guard=True, fallback=None)
    bare.runner.run = Faulty(bare.runner.run, {1: "nan"})
    with pytest.raises(deploy.GuardError, match="nonfinite"):
        bare.act(np.zeros(3, np.float32))


def test_guard_in_eval_writes_counters_to_trace(bundles, tmp_path, capsys):
    trace = str(tmp_path / "t.npz")
    rc = main(["eval", bundles["cartpole"], "--backend", "onnxruntime", "--guard", "--latency-budget-ms", "1000",
               "--episodes", "1", "--record", trace, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["guard"]["calls"] > 0 and out["guard"]["fallback_backend"] == "mindspore"
    with np.load(trace) as z:
        meta = json.loads(bytes(z["meta"]).decode())
    assert meta["guard"]["calls"] == out["guard"]["calls"] and meta["guard"]["violations"]["nonfinite"] == 0


def test_guard_moves_to_the_fallback_after_calls_over_the_latency_budget(bundles):
    import time as _time

    d = bundles["pendulum"]
    pi = load_policy(d, backend="mindspore", guard=True, latency_budget_ms=20.0, switch_after=3)
    slow_calls = {5, 6, 7}  # three consecutive calls take 50 ms (a stalled device)
    inner, n = pi.runner.run, {"calls": 0}

    def stalling(x):
        n["calls"] += 1
        if n["calls"] in slow_calls:
            _time.sleep(0.05)
        return inner(x)

    pi.runner.run = stalling
    ref = load_policy(d, backend="mindspore")
    x = np.zeros(3, np.float32)
    for i in range(10):
        a = pi.act(x)  # late actions are still the right actions
        assert np.abs(a - ref.act(x)).max() <= 1e-5
        assert pi.guard_stats()["switched_to_fallback"] == (i >= 6)
    s = pi.guard_stats()
    assert s["violations"]["latency"] == 3 and n["calls"] == 7  # calls 8-10 went to onnxruntime
    # counting only: switch_after=0 keeps the primary
    keep = load_policy(d, backend="mindspore", guard=True, latency_budget_ms=0.0001, switch_after=0)
    for _ in range(5):
        keep.act(x)
    assert keep.guard_stats()["violations"]["latency"] == 5 and not keep.guard_stats()["switched_to_fallback"]
