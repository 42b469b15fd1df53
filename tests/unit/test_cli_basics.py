"""The command line as a newcomer meets it: --version, shipped configs by name,
usage errors for paths that do not exist, the progress bar's total, a fresh interpreter's
load_config. Subprocess tests run the command as a user would."""
import io
import os
import subprocess
import sys

import pytest
from helpers import CONFIGS, msrl

import msrl_consistent
from msrl_consistent.config import ConfigError, load_config, resolve_config, shipped_configs


def test_version():
    r = msrl("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"msrl-consistent {msrl_consistent.__version__}"


def test_configs_lists_shipped_configs_with_algorithm_env_budget():
    r = msrl("configs")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["name", "algorithm", "env", "total_timesteps"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines[1:] if ln and not ln.startswith("train one")}
    assert rows["ppo/CartPole-v1"] == ["ppo", "CartPole-v1", "100000"]
    assert rows["sac/HalfCheetah-v5"] == ["sac", "HalfCheetah-v5", "1000000"]
    on_disk = {f"{a}/{f[:-5]}" for a in os.listdir(CONFIGS) if os.path.isdir(os.path.join(CONFIGS, a))
               for f in os.listdir(os.path.join(CONFIGS, a)) if f.endswith(".yaml")}
    assert set(rows) == on_disk


def test_config_by_name_path_and_readme_path_outside_the_source_tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here
    by_name = load_config("ppo/CartPole-v1")
    assert by_name.algorithm == "ppo" and by_name.env.id == "CartPole-v1"
    assert resolve_config("configs/ppo/CartPole-v1.yaml") == shipped_configs()["ppo/CartPole-v1"]
    assert resolve_config("ppo/CartPole-v1.yaml") == shipped_configs()["ppo/CartPole-v1"]
    own = tmp_path / "mine.yaml"
    own.write_text("algorithm: ppo\nenv: {id: CartPole-v1}\n")
    assert resolve_config(str(own)) == str(own)  # a path still wins
    with pytest.raises(ConfigError) as exc:
        load_config("ppo/CartPol")
    msg = str(exc.value)
    assert "\n" not in msg and "did you mean 'ppo/CartPole-v1'" in msg
    assert all(name in msg for name in shipped_configs())


def test_train_unknown_config_name_is_one_line_error(tmp_path):
    r = msrl("train", "ppo/NoSuchEnv-v0", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.startswith("msrl: error: config file not found: ppo/NoSuchEnv-v0")
    assert "ppo/CartPole-v1" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("backend", ["onnxruntime", "mindspore", "train", None])
def test_eval_of_a_missing_directory_says_so(tmp_path, backend):
    # it used to say "exports/does-not-exist is a run directory: only --backend train applies"
    args = ["eval", "exports/does-not-exist"] + (["--backend", backend] if backend else [])
    r = msrl(*args, cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == "msrl: error: no such run or export directory: exports/does-not-exist"


def test_eval_of_a_directory_that_is_neither(tmp_path):
    (tmp_path / "empty").mkdir()
    r = msrl("eval", "empty", "--backend", "onnxruntime", cwd=tmp_path)
    assert r.returncode == 2
    assert "neither a run directory (no config.yaml) nor an export directory (no manifest.json)" in r.stderr


def test_load_config_in_a_fresh_interpreter(tmp_path):
    # the algorithm list was empty until something imported the algorithms package.
    code = ("from msrl_consistent.config import load_config\n"
            f"cfg = load_config({os.path.join(CONFIGS, 'ppo', 'CartPole-v1.yaml')!r})\n"
            "print(cfg.algorithm, cfg.env.id, cfg.algo.n_steps)\n")
    r = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env=dict(os.environ, GLOG_v="3"), timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:2] == ["ppo", "CartPole-v1"]


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_keeps_its_total_when_the_last_rollout_overshoots(tmp_path, monkeypatch):
    # tqdm drops a total that n exceeds ("30208step [00:20, ...]").
    from msrl_consistent.logging import RunLogger

    err = _Tty()
    monkeypatch.setattr(sys, "stdout", _Tty())
    monkeypatch.setattr(sys, "stderr", err)
    log = RunLogger(str(tmp_path), 30_000, tensorboard=False, progress=True)
    for step in range(1024, 30_208 + 1, 1024):
        log.progress(step)
    log.progress(30_208)
    log.close()
    final = err.getvalue().replace("\r", "\n").strip().splitlines()[-1]
    assert "30208/30208" in final and "100%" in final, final
