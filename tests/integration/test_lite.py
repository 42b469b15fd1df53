"""MindSpore Lite for real: the runtime `msrl lite install` puts into this user's cache (PyPI's
mindspore-lite 2.0.0 libraries and msrl's C shim), its install and status, the shim's own checks,
`msrl export --format lite` and its refusals, the lite backend of verify / eval / replay / the
board's check, and the ATC pre-flight. Lite's Ascend target cannot run here: its conversion and
its runtime fail naming CANN, which is what is tested of it (its call sequence through Lite's
Python module is the stand-in test in test_bundle.py)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import board, msrl

from msrl_consistent.cli import main
from msrl_consistent.deploy import BackendUnavailable, ExportError, lite
from msrl_consistent.export import writers
from msrl_consistent.export.exporter import export_run
from msrl_consistent.export.preflight import PreflightError, preflight
from msrl_consistent.export.verify import verify_export
from msrl_consistent.runtime import load_policy


@pytest.fixture(scope="module")
def lite_exports(cartpole_run, pendulum_run, lite_runtime, tmp_path_factory):
    """PPO CartPole (discrete) and PPO Pendulum (continuous, normalization) exported with --format lite."""
    root = tmp_path_factory.mktemp("lite")
    out = {}
    for name, run in (("cartpole", cartpole_run), ("pendulum", pendulum_run)):
        out[name] = str(root / name)
        assert main(["export", run, "--out", out[name], "--format", "lite", "--golden", "256"]) == 0
    return out


def test_install_is_idempotent_and_status_says_what_is_where(lite_runtime):
    r = msrl("lite", "install")
    assert r.returncode == 0 and "already installed" in r.stdout, r.stdout + r.stderr
    s = msrl("lite", "status", "--json")
    status = json.loads(s.stdout)
    assert s.returncode == 0 and status["installed"] and status["loads"] and status["current"]
    assert status["record"]["lite_version"] == "2.0.0" and status["record"]["self_check"]["max_abs_error"] <= 1e-6
    assert os.path.isfile(os.path.join(status["home"], status["record"]["shim"]))


@pytest.mark.slow
def test_fresh_install_into_a_directory_of_its_own(tmp_path):
    home = str(tmp_path / "lite-home")
    r = msrl("lite", "install", "--home", home, "--json")
    assert r.returncode == 0, r.stderr
    record = json.loads(r.stdout)
    assert record["lite_version"] == "2.0.0" and record["shim_abi"] == lite.SHIM_ABI
    assert record["self_check"]["max_abs_error"] <= 1e-6 and record["disk_bytes"] > 100 << 20
    assert sorted(os.listdir(home)) == ["install.json", "lite-2.0.0"]  # staging removed
    assert "loads" in msrl("lite", "status", "--home", home).stdout


@pytest.mark.parametrize("env,args,words", [
    ({"CXX": "/no/such/g++"}, [], "no C++ compiler found"),
    ({}, ["--wheel", "/no/such.whl"], "--wheel /no/such.whl: no such file"),
    ({}, ["--wheel", __file__], "cannot be read as a wheel"),
])
def test_install_refusals_are_one_line_and_leave_nothing(env, args, words, tmp_path):
    home = str(tmp_path / "home")
    r = msrl("lite", "install", "--home", home, "--force", *args, env=dict(os.environ, **env))
    assert r.returncode == 2 and r.stderr.startswith("msrl: error: ") and "Traceback" not in r.stderr
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not os.path.exists(os.path.join(home, "install.json"))
    assert [n for n in os.listdir(home) if n.startswith(".staging")] == [] if os.path.isdir(home) else True


def test_install_names_pip_failure_and_the_platform(monkeypatch, tmp_path):
    from msrl_consistent import lite_install
    monkeypatch.setattr(lite_install, "WHEEL", "mindspore-lite==0.0.0.999")  # a version PyPI does not have
    with pytest.raises(lite_install.LiteInstallError, match="pip could not fetch mindspore-lite==0.0.0.999.*--wheel"):
        lite_install.fetch_wheel(str(tmp_path))
    monkeypatch.setattr(lite_install.platform, "machine", lambda: "aarch64")
    with pytest.raises(lite_install.LiteInstallError, match="x86_64 Linux only.*aarch64.*Huawei's MindSpore Lite wheel"):
        lite_install.check_platform()


SHIM_CHECKS = r'''
import ctypes, sys, numpy as np
sys.path.insert(0, sys.argv[1])
from msrl_consistent.deploy import lite
lib = lite.load_shim()
err = ctypes.create_string_buffer(4096)
def msg(code):
    return (code, err.value.decode())
h = lib.msrl_lite_open(sys.argv[2].encode(), b"cpu", 0, b"enforce_fp32", 1, 0, err, 4096)
assert h, err.value
h = ctypes.c_void_p(h)
bogus = ctypes.c_void_p(12345)
x = np.zeros((2, 4), np.float32)
p = x.ctypes.data_as(ctypes.c_void_p)
ranks, dims = (ctypes.c_int * 1)(2), (ctypes.c_int64 * 2)(2, 4)
out = {
  "count_bogus": lib.msrl_lite_count(bogus, 0),
  "predict_bogus": msg(lib.msrl_lite_predict(bogus, err, 4096)),
  "resize_count": msg(lib.msrl_lite_resize(h, 2, ranks, dims, err, 4096)),
  "resize_negative": msg(lib.msrl_lite_resize(h, 1, ranks, (ctypes.c_int64 * 2)(-2, 4), err, 4096)),
  "resize_ok": msg(lib.msrl_lite_resize(h, 1, ranks, dims, err, 4096)),
  "set_null": msg(lib.msrl_lite_set_input(h, 0, 43, None, 32, err, 4096)),
  "set_index": msg(lib.msrl_lite_set_input(h, 3, 43, p, 32, err, 4096)),
  "set_dtype": msg(lib.msrl_lite_set_input(h, 0, 34, p, 32, err, 4096)),
  "set_bytes": msg(lib.msrl_lite_set_input(h, 0, 43, p, 31, err, 4096)),
  "set_ok": msg(lib.msrl_lite_set_input(h, 0, 43, p, 32, err, 4096)),
  "predict_ok": msg(lib.msrl_lite_predict(h, err, 4096)),
  "get_bytes": msg(lib.msrl_lite_get_output(h, 0, p, 3, err, 4096)),
  "get_index": msg(lib.msrl_lite_get_output(h, 9, p, 8, err, 4096)),
  "open_target": (lib.msrl_lite_open(sys.argv[2].encode(), b"gpu", 0, b"enforce_fp32", 1, 0, err, 4096), err.value.decode()),
  "open_threads": (lib.msrl_lite_open(sys.argv[2].encode(), b"cpu", 0, b"enforce_fp32", 0, 0, err, 4096), err.value.decode()),
  "open_mode": (lib.msrl_lite_open(sys.argv[2].encode(), b"cpu", 0, b"enforce_fp16", 1, 0, err, 4096), err.value.decode()),
  "close": lib.msrl_lite_close(h), "close_again": lib.msrl_lite_close(h),
}
print(repr(out))
'''


def test_the_shim_checks_every_handle_pointer_index_and_size(lite_exports):
    """The compiled shim refuses what ctypes could hand it wrongly, with a message, never a crash
    (run in a process without MindSpore, as Lite must be)."""
    import ast
    root = os.path.dirname(os.path.dirname(os.path.abspath(lite.__file__)))
    model = os.path.join(lite_exports["cartpole"], "actor_lite.mindir")
    r = subprocess.run([sys.executable, "-c", SHIM_CHECKS, os.path.dirname(root), model], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, GLOG_v="3"))
    assert r.returncode == 0, r.stderr[-2000:]
    out = ast.literal_eval(r.stdout.strip().splitlines()[-1])
    assert out["count_bogus"] == -1 and out["predict_bogus"] == (-1, "msrl_lite_predict: not a live model handle")
    assert out["resize_count"] == (-1, "msrl_lite_resize: 2 shapes for 1 inputs")
    assert out["resize_negative"] == (-1, "msrl_lite_resize: bad dimension") and out["resize_ok"][0] == 0
    assert out["set_null"] == (-1, "msrl_lite_set_input: NULL data")
    assert out["set_index"] == (-1, "msrl_lite_set_input: no input 3")
    assert out["set_dtype"] == (-1, "msrl_lite_set_input: input 0 has dtype code 43, given 34")
    assert out["set_bytes"] == (-1, "msrl_lite_set_input: input 0 holds 32 bytes, given 31")
    assert out["set_ok"][0] == 0 and out["predict_ok"][0] == 1
    assert out["get_bytes"] == (-1, "msrl_lite_get_output: output 0 holds 8 bytes, given 3")
    assert out["get_index"] == (-1, "msrl_lite_get_output: no output 9")
    assert out["open_target"] == (None, "msrl_lite_open: target must be 'cpu' or 'ascend', got 'gpu'")
    assert out["open_threads"][0] is None and "threads must be 1..1024, device_id >= 0, affinity 0..2" in out["open_threads"][1]
    assert out["open_mode"][0] is None and "cpu precision_mode must be enforce_fp32 or preferred_fp16" in out["open_mode"][1]
    assert out["close"] == 0 and out["close_again"] == -1


def test_a_shim_of_other_signatures_is_refused_by_number(lite_runtime):
    """A shim built from an older source (other C signatures) is never called: its ABI number says so."""
    code = ("from msrl_consistent.deploy import lite\nlite.SHIM_ABI += 1\ntry:\n    lite.load_shim()\n"
            "except lite.BackendUnavailable as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, GLOG_v="3"))
    assert f"Lite shim ABI {lite.SHIM_ABI}, this code needs {lite.SHIM_ABI + 1}; run `msrl lite install --force`" in r.stdout, \
        r.stdout + r.stderr


def test_verify_eval_and_replay_run_on_lite(lite_exports, tmp_path, capsys):
    """Discrete: identical to the training cell; continuous: within 1e-5. In this process MindSpore is
    loaded, so Lite runs in a process of its own."""
    cp, pend = lite_exports["cartpole"], lite_exports["pendulum"]
    r = verify_export(cp, backend="lite", episodes=3)
    assert r["passed"] and r["golden"]["agreement"] == 1.0 and r["rollouts"]["identical_episodes"] == 3
    r = verify_export(pend, backend="lite", episodes=2)
    assert r["passed"] and r["golden"]["max_abs_error"] <= 1e-5
    pol = load_policy(cp, backend="lite")
    assert pol.runner.info["process"] == "own" and pol.runner.info["binding"] == "shim"
    trace = str(tmp_path / "t.npz")
    assert main(["eval", pend, "--backend", "lite", "--episodes", "2", "--record", trace, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == "lite"
    assert main(["replay", pend, trace, "--against", "lite"]) == 0
    assert "max abs error 0;" in capsys.readouterr().out  # Lite against itself: the same numbers
    assert main(["replay", pend, trace, "--against", "train"]) == 0


def test_the_bundle_runs_lite_on_a_board_without_msrl_or_mindspore(lite_exports, board_path):
    for name in ("cartpole", "pendulum"):
        r = board(board_path, lite_exports[name], "check", "--backend", "lite", "--latency-seconds", "0.2")
        assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
        report = json.load(open(os.path.join(lite_exports[name], "report-check-mindspore_lite.json")))
        assert report["runner"]["binding"] == "shim" and "process" not in report["runner"]  # in the board's process
        assert report["runner"]["file"] == "actor_lite.mindir" and report["runner"]["precision_mode"] == "enforce_fp32"
    home = {"MSRL_LITE_HOME": lite.lite_home(), "HOME": "/nonexistent"}  # found by the variable alone
    assert board(board_path, lite_exports["cartpole"], "check", "--backend", "lite", "--latency-seconds", "0",
                 env=home).returncode == 0
    code = ("from policy import load\nimport numpy as np\npi = load('.', backend='lite', pin=True)\n"
            "print(pi.runner.info['pinned'], pi.act(np.zeros((3, 4), np.float32)).tolist())")
    r = subprocess.run([sys.executable, "-S", "-c", code], cwd=lite_exports["cartpole"], capture_output=True, text=True,
                       env={"PYTHONPATH": board_path, "HOME": os.environ.get("HOME", "/tmp"), "GLOG_v": "3",
                            "MSRL_LITE_HOME": lite.lite_home()})
    want = load_policy(lite_exports["cartpole"], backend="onnxruntime").act(np.zeros((3, 4), np.float32)).tolist()
    assert r.returncode == 0 and r.stdout.split(" ", 1) == ["True", f"{want}\n"], r.stdout + r.stderr


def test_mindspore_mindir_on_lite_names_the_version_and_the_way_out(cartpole_run, lite_runtime, tmp_path):
    out = str(tmp_path / "mindir-only")
    export_run(cartpole_run, out, formats=["mindir", "onnx"], golden=32)
    assert lite.mindir_version(os.path.join(out, "actor.mindir")) == 3
    with pytest.raises(ExportError, match=r"actor.mindir: MindIR version 3 .*Lite 2.0.0 reads MindIR up to version 1: "
                                          r"export with --format lite"):
        load_policy(out, backend="lite")


def test_a_model_the_converter_refuses_is_one_line_and_nothing_is_written(cartpole_run, lite_runtime, monkeypatch,
                                                                          tmp_path, capsys):
    from onnx import helper

    from msrl_consistent.export import lite as lite_export
    rewrite = lite_export.computed_pow_bases

    def planted(model):  # an operator Lite's converter does not know
        model.graph.node.append(helper.make_node("FooBar", [model.graph.input[0].name], ["planted"], name="planted",
                                                 domain="com.example"))
        model.opset_import.append(helper.make_opsetid("com.example", 1))
        return rewrite(model)
    monkeypatch.setattr(lite_export, "computed_pow_bases", planted)
    out = tmp_path / "refused"
    assert main(["export", cartpole_run, "--out", str(out), "--format", "lite"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("msrl: error: actor.onnx: MindSpore Lite's converter refused it") and "FooBar" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists() and os.listdir(tmp_path) == []


def test_the_ascend_target_is_explicit_and_needs_cann_where_it_runs(lite_exports, cartpole_run, tmp_path, capsys):
    from msrl_consistent.export.lite import converter_config
    assert converter_config("ascend", "enforce_fp32") == "[ascend_context]\nprecision_mode=enforce_fp32\n"
    assert converter_config("cpu", "enforce_fp32") == ""
    out = tmp_path / "ascend"
    assert main(["export", cartpole_run, "--out", str(out), "--format", "lite", "--lite-target", "ascend"]) == 2
    err = capsys.readouterr().err
    assert "ascend_oriented" in err and "CANN" in err and not out.exists()
    assert main(["export", cartpole_run, "--out", str(out), "--format", "lite", "--lite-target", "ascend",
                 "--lite-precision-mode", "fp16"]) == 2
    assert "expected one of enforce_fp32" in capsys.readouterr().err
    with pytest.raises(BackendUnavailable, match="Lite target ascend could not start.*CANN"):
        load_policy(lite_exports["cartpole"], backend="lite", target="ascend")
    m = json.load(open(os.path.join(lite_exports["cartpole"], "manifest.json")))["export"]["conversion"]["lite"]
    assert m["target"] == "cpu" and m["optimize"] == "general" and m["precision_mode"] == "enforce_fp32"
    assert m["weight_fp16"] is False and m["lite_version"] == "2.0.0" and m["config"] == ""


def _with_op(onnx_path, dst, op_type, inputs):
    import onnx
    from onnx import helper
    model = onnx.load(onnx_path)
    model.graph.node.append(helper.make_node(op_type, inputs(model), [f"planted_{op_type}"], name="planted"))
    onnx.save(model, dst)
    return dst


def test_the_atc_preflight_names_what_atc_would_refuse(lite_exports, cartpole_run, monkeypatch, tmp_path, capsys):
    onnx_path = os.path.join(lite_exports["cartpole"], "actor.onnx")
    ok = preflight(onnx_path, "force_fp32")
    assert ok["passed"] and ok["cann_version"] == "8.0.0" and "Gemm" in ok["operators"]
    planted = _with_op(onnx_path, str(tmp_path / "unique.onnx"), "Unique", lambda m: [m.graph.input[0].name])
    bad = preflight(planted, "force_fp32")
    assert not bad["passed"] and bad["refused"] == [
        "operator Unique (node planted) is not in CANN 8.0.0's list of ONNX operators for Atlas inference products"]
    matmul = _with_op(onnx_path, str(tmp_path / "matmul.onnx"), "MatMul",
                      lambda m: [m.graph.input[0].name, m.graph.input[0].name + "_t"])
    import onnx
    from onnx import helper
    model = onnx.load(matmul)  # obs (B, 4) @ a (4, 4) float32 initializer
    model.graph.initializer.append(helper.make_tensor(model.graph.input[0].name + "_t", onnx.TensorProto.FLOAT, [4, 4],
                                                      np.eye(4, dtype=np.float32).ravel().tolist()))
    onnx.save(model, matmul)
    kept = preflight(matmul, "must_keep_origin_dtype")
    assert not kept["passed"] and "operator MatMul (node planted): input 0 is float32, CANN lists float16" in kept["refused"][0]
    assert "must_keep_origin_dtype keeps float32, so ATC refuses it" in kept["refused"][0]
    fp32 = preflight(matmul, "force_fp32")
    assert fp32["passed"] and fp32["float16_on_device"] == ["MatMul input 0 (planted)", "MatMul input 1 (planted)"]

    # the command: exit 0 and a manifest with the report; a planted operator: exit 2 naming it, nothing written
    out = tmp_path / "pre"
    assert main(["export", cartpole_run, "--out", str(out), "--format", "om", "--preflight-only"]) == 0
    m = json.load(open(out / "manifest.json"))
    assert m["export"]["conversion"]["atc_preflight"]["passed"] and "actor.om" not in m["files"]
    assert "ATC pre-flight passed" in capsys.readouterr().out
    real = writers.write_onnx

    def write_planted(cell, inputs, batch, path, **kw):
        info = real(cell, inputs, batch, path, **kw)
        _with_op(path, path, "Unique", lambda mdl: [mdl.graph.input[0].name])
        return info
    monkeypatch.setattr(writers, "write_onnx", write_planted)
    bad_out = tmp_path / "pre-bad"
    assert main(["export", cartpole_run, "--out", str(bad_out), "--format", "om", "--preflight-only"]) == 2
    err = capsys.readouterr().err
    assert "ATC pre-flight (CANN 8.0.0 ONNX operator list for Atlas inference products): operator Unique" in err
    assert len(err.strip().splitlines()) == 1 and not bad_out.exists()
    with pytest.raises(PreflightError):
        export_run(cartpole_run, str(bad_out), formats=["om"], preflight_only=True)
    assert main(["export", cartpole_run, "--out", str(bad_out), "--preflight-only"]) == 2
    assert "--preflight-only checks what ATC would refuse: it needs --format om" in capsys.readouterr().err
