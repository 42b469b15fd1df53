"""A newcomer's first hour, the parts that need a trained run: a missing optional
package is `msrl: error: ...` with the install command and exit 2 for every command (never a
traceback), the exported actor.mindir is readable like every other file of the export,
load_policy works after the user's own MindSpore code ran, and a config is trained by name
from a directory without configs/."""
import json
import os
import stat
import subprocess
import sys

import pytest
from helpers import hide_modules, msrl


@pytest.fixture(scope="module")
def full_export(cartpole_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("newcomer") / "cartpole"
    r = msrl("export", cartpole_run, "--out", out, "--format", "mindir,onnx", "--golden", "64")
    assert r.returncode == 0, r.stderr
    trace = out.parent / "trace.npz"
    r = msrl("eval", out, "--episodes", "1", "--record", trace)
    assert r.returncode == 0, r.stderr
    return str(out), str(trace)


def _commands(run, export, trace, tmp):
    return {
        "export --format onnx": (["export", run, "--out", os.path.join(tmp, "x"), "--format", "mindir,onnx"], "onnx"),
        "verify --backend onnxruntime": (["verify", export, "--backend", "onnxruntime", "--episodes", "1"],
                                         "onnxruntime"),
        "eval --backend onnxruntime": (["eval", export, "--backend", "onnxruntime", "--episodes", "1"], "onnxruntime"),
        "replay --against onnxruntime": (["replay", export, trace, "--against", "onnxruntime"], "onnxruntime"),
        # Lite 2.0.0 cannot read MindSpore 2.10's actor.mindir: the way out is named
        "verify --backend lite": (["verify", export, "--backend", "lite", "--episodes", "1"], "--format lite"),
        "plot": (["plot", run, "--out", os.path.join(tmp, "p.png"), "--metric", "train"], "matplotlib"),
    }


@pytest.mark.parametrize("command", ["export --format onnx", "verify --backend onnxruntime", "eval --backend onnxruntime",
                                     "replay --against onnxruntime", "verify --backend lite", "plot"])
def test_missing_optional_package_is_a_usage_error(command, cartpole_run, full_export, tmp_path):
    # `--format onnx` without the onnx package ended in a RuntimeError traceback.
    export, trace = full_export
    args, package = _commands(cartpole_run, export, trace, str(tmp_path))[command]
    r = msrl(*args, env=hide_modules(tmp_path, "onnx", "onnxruntime", "matplotlib"))
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.startswith("msrl: error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert package in r.stderr
    if package != "--format lite":
        assert f"pip install {package}" in r.stderr or f"pip install onnx {package}" in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(str(tmp_path), "x"))  # export failed before any work


def test_actor_mindir_is_readable_like_every_other_file(full_export):
    # mindspore.export writes actor.mindir as 0400 (owner read only).
    export, _ = full_export
    modes = {name: stat.S_IMODE(os.stat(os.path.join(export, name)).st_mode) for name in os.listdir(export)}
    mask = os.umask(0o022)
    os.umask(mask)
    assert modes["actor.mindir"] == 0o666 & ~mask, {k: oct(v) for k, v in modes.items()}
    assert len(set(modes.values())) == 1, {k: oct(v) for k, v in modes.items()}


def test_load_policy_after_the_users_own_mindspore_code(cartpole_run, tmp_path):
    # "MindSpore cannot use device 'CPU': The runtime has been initialized" although
    # the device already was CPU.
    code = ("import numpy as np, mindspore as ms\n"
            "print(ms.Tensor(np.ones(3, np.float32)) + 1)\n"
            "from msrl_consistent.runtime import load_policy\n"
            f"p = load_policy({cartpole_run!r}, backend='train')\n"
            "print('action', int(p.act(np.zeros(4, np.float32))))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env=dict(os.environ, GLOG_v="3"), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "action" in r.stdout


@pytest.mark.slow
def test_train_by_name_from_a_directory_without_configs(tmp_path):
    # an installed package (no source tree) trains a shipped config by name.
    r = msrl("train", "ppo/CartPole-v1", "--total-timesteps", "512", "--run-dir", "run", "--quiet",
             "--set", "eval.freq=0", "--set", "eval.episodes=1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.load(open(tmp_path / "run" / "summary.json"))
    assert summary["env"] == "CartPole-v1" and summary["num_timesteps"] >= 512


def test_missing_environment_package_leaves_no_run_directory(tmp_path):
    # The same command must work once the package is installed (not "run directory exists").
    r = msrl("train", "ppo/InvertedPendulum-v5", "--total-timesteps", "512", "--run-dir", "run", "--quiet",
             cwd=tmp_path, env=hide_modules(tmp_path, "mujoco"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.startswith("msrl: error:") and "mujoco" in r.stderr and "pip install" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()
