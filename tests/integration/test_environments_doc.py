"""docs/environments.md as a user runs it: its myenv.py and goto.yaml saved into an empty directory
that is not the checkout, every `msrl` command of its bash block run there with the installed
`msrl` script and no PYTHONPATH, then its Python block as a script in the same directory."""
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from helpers import ROOT

DOC = os.path.join(ROOT, "docs", "environments.md")


def blocks(lang):
    return re.findall(rf"^```{lang}\n(.*?)^```", open(DOC, encoding="utf-8").read(), re.S | re.M)


def user_env():
    """The environment of a user's shell: no PYTHONPATH, nothing of the checkout importable."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["GLOG_v"] = "3"
    return env


def msrl_script():
    exe = os.path.join(os.path.dirname(sys.executable), "msrl")
    assert os.path.isfile(exe), "the msrl console script is installed beside the interpreter"
    return exe


def test_doc_blocks_are_the_example():
    py, yml, sh = blocks("python"), blocks("yaml"), blocks("bash")
    assert "gym.register(\"GoToTarget-v0\"" in py[0] and "myenv:Relative" in yml[0]
    commands = [shlex.split(line, comments=True) for line in sh[0].splitlines() if line.strip()]
    assert [c[1] for c in commands] == ["check-env", "train", "eval", "export", "export", "verify", "verify", "train"]


@pytest.mark.slow
def test_environments_doc_runs_as_written(tmp_path):
    py, yml, sh = blocks("python"), blocks("yaml"), blocks("bash")
    (tmp_path / "myenv.py").write_text(py[0])
    (tmp_path / "goto.yaml").write_text(yml[0])
    assert not str(tmp_path).startswith(ROOT)
    for line in sh[0].splitlines():
        if not line.strip():
            continue
        argv = shlex.split(line, comments=True)
        r = subprocess.run([msrl_script(), *argv[1:]], cwd=tmp_path, env=user_env(), capture_output=True, text=True,
                           timeout=900)
        if "refused, exit 2" in line:
            assert r.returncode == 2, (line, r.stdout, r.stderr)
            assert r.stderr.startswith("msrl: error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
            assert "myenv:Relative (observation" in r.stderr and "--allow-host-wrappers" in r.stderr
            assert not (tmp_path / "exports" / "goto").exists()  # nothing written
        else:
            assert r.returncode == 0, (line, r.stdout[-2000:], r.stderr[-3000:])
            assert "Traceback" not in r.stderr
    manifest = json.loads((tmp_path / "exports" / "goto" / "manifest.json").read_text())
    recipe = manifest["env_recipe"]
    assert recipe["id"] == "myenv:GoToTarget-v0" and recipe["entry_point"] == "myenv:GoToTarget"
    assert recipe["kwargs"] == {"size": 2.0, "max_steps": 40}
    assert recipe["modules"]["myenv"]["file"] == str(tmp_path / "myenv.py")
    assert manifest["host_preprocessing"] == [{"entry": "myenv:Relative", "kwargs": {"scale": 0.5},
                                              "kind": "observation", "host": True}]
    assert manifest["env"]["wrappers"] == [{"entry": "myenv:Relative", "kwargs": {"scale": 0.5}}]
    # the bundle's own check names the host preprocessing its control loop must apply
    r = subprocess.run([sys.executable, "policy.py", "check", "--backend", "onnxruntime"], cwd=tmp_path / "exports" / "goto",
                       env=user_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "host preprocessing the control loop must apply around act(): myenv:Relative" in r.stdout
    for run in ("goto", "goto-sac"):
        summary = json.loads((tmp_path / "runs" / run / "summary.json").read_text())
        assert summary["env_recipe"]["id"] == "myenv:GoToTarget-v0", run
    # the Python block, as a script beside myenv.py
    (tmp_path / "from_python.py").write_text(py[1])
    r = subprocess.run([sys.executable, "from_python.py"], cwd=tmp_path, env=user_env(), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("myenv:GoToTarget "), r.stdout
    assert "need it again" in r.stderr  # the instance's run says so, once
    assert (tmp_path / "exports" / "goto-instance" / "manifest.json").is_file()
    # a later process cannot rebuild the instance's environment, and says so in one line
    r = subprocess.run([msrl_script(), "eval", "runs/goto-instance", "--episodes", "1"], cwd=tmp_path, env=user_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "env= again" in r.stderr, r.stderr
    # the run directory is rebuilt from another directory too, with the module on PYTHONPATH
    r = subprocess.run([msrl_script(), "eval", str(tmp_path / "runs" / "goto-py"), "--episodes", "1"], cwd=ROOT,
                       env=dict(user_env(), PYTHONPATH=str(tmp_path)), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
