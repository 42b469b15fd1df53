"""Data-parallel training through msrun with CPU collectives (PPO, SAC, TD3, DQN): identical parameters on
every rank, reproducible launches, and a dead worker reported by rank with the last checkpoint intact."""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from msrl_consistent import checkpoint as ckpt
from msrl_consistent.distributed import msrun_command

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs")
CONFIG = os.path.join(CONFIGS, "ppo", "CartPole-v1.yaml")


def free_port():
    """A port no one listens on now (fixed ports collide with another suite running on the machine)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(run_dir, steps, port=None, extra=(), wait=True, env=None, cwd=None, config=CONFIG):
    cmd = [sys.executable, "-m", "msrl_consistent", "train", config, "--workers", "2", "--run-dir", str(run_dir),
           "--total-timesteps", str(steps), "--master-port", str(port or free_port()), "--set", "eval.freq=0",
           "--set", "eval.episodes=1", "--quiet", *extra]
    env = env or dict(os.environ, GLOG_v="3")
    if wait:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=cwd)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)


SMALL_OFFPOLICY = ("--set", "algo.learning_starts=100", "--set", "algo.batch_size=64", "--set",
                   "policy.net_arch=[64, 64]", "--set", "log.tensorboard=false")


def test_msrun_command():
    cmd = msrun_command("/r/.msrun_entry.py", ["train", "c.yaml"], 8, 8118, "/r/logs", local_workers=4,
                        master_addr="10.0.0.1", node_rank=1)
    assert cmd[:7] == ["msrun", "--worker_num=8", "--local_worker_num=4", "--master_addr=10.0.0.1",
                       "--master_port=8118", "--node_rank=1", "--log_dir=/r/logs"]
    assert cmd[-3:] == ["/r/.msrun_entry.py", "train", "c.yaml"]
    with pytest.raises(ValueError):
        msrun_command("e", [], 0, 1, "l")


@pytest.mark.slow
def test_two_workers_identical_parameters_and_reproducible_with_either_pipeline(tmp_path):
    """The second launch overlaps each rank's env steps with its acting (env.pipeline: overlap, groups
    of 4 envs): the same parameters as the first, sequential one."""
    hashes = []
    for i, pipeline in enumerate(("sequential", "overlap")):
        run = tmp_path / f"run{i}"
        proc = launch(run, 2048, extra=("--set", f"env.pipeline={pipeline}"))
        assert proc.returncode == 0, proc.stderr[-3000:]
        ranks = [json.load(open(run / "ranks" / f"{r}.json")) for r in (0, 1)]
        assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"]
        assert all(r["status"] == "finished" and r["num_timesteps"] == 2048 for r in ranks)
        summary = json.load(open(run / "summary.json"))
        assert summary["params_sha256"] == ranks[0]["params_sha256"]
        assert (run / "checkpoints" / "final.safetensors").is_file()
        hashes.append(ranks[0]["params_sha256"])
    assert hashes[0] == hashes[1]


@pytest.mark.slow
@pytest.mark.parametrize("algo, env_id", [("sac", "Pendulum-v1"), ("td3", "Pendulum-v1"), ("dqn", "CartPole-v1")])
def test_offpolicy_two_workers_identical_parameters(algo, env_id, tmp_path):
    # each rank fills its own buffer and samples its own batches; the ranks' mean gradient keeps
    # the critics, the actor, the targets, SAC's temperature and DQN's target clock identical
    run = tmp_path / "run"
    small = SMALL_OFFPOLICY + (("--set", "algo.train_freq=50", "--set", "algo.gradient_steps=10") if algo == "dqn" else ())
    config = os.path.join(CONFIGS, algo, f"{env_id}.yaml")
    proc = launch(run, 400, config=config, extra=small)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.load(open(run / "ranks" / f"{r}.json")) for r in (0, 1)]
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"]
    assert all(r["status"] == "finished" and r["num_timesteps"] == 400 for r in ranks)
    # the ranks' own data made a difference: a single process of the same config trains other parameters
    one = tmp_path / "one"
    r = subprocess.run([sys.executable, "-m", "msrl_consistent", "train", config, "--run-dir", str(one),
                        "--total-timesteps", "400", "--set", "eval.freq=0", "--set", "eval.episodes=1", "--quiet", *small],
                       capture_output=True, text=True,
                       env=dict(os.environ, GLOG_v="3"), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.load(open(one / "summary.json"))["params_sha256"] != ranks[0]["params_sha256"]


@pytest.mark.slow
def test_recurrent_two_workers_identical_parameters(tmp_path):
    """Recurrent PPO data-parallel: each rank carries its own envs' LSTM state, the ranks' mean
    gradient over their sequence minibatches keeps the parameters identical on both."""
    run = tmp_path / "run"
    small = ("--set", "env.n_envs=4", "--set", "algo.n_steps=8", "--set", "algo.batch_size=16", "--set",
             "algo.n_epochs=2", "--set", "policy.lstm_hidden_size=16")
    proc = launch(run, 256, config=os.path.join(CONFIGS, "ppo", "CartPoleNoVel-v1-lstm.yaml"), extra=small)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.load(open(run / "ranks" / f"{r}.json")) for r in (0, 1)]
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"]
    assert all(r["status"] == "finished" and r["num_timesteps"] == 256 for r in ranks)


def wait_for(pattern, seconds=300):
    deadline = time.time() + seconds
    while time.time() < deadline and not glob.glob(pattern):
        time.sleep(0.5)
    assert glob.glob(pattern), f"nothing matches {pattern} after {seconds} s"


def resume(run, workers="2"):
    return subprocess.run([sys.executable, "-m", "msrl_consistent", "train", "--resume", str(run), "--workers", workers,
                           "--master-port", str(free_port()), "--quiet"], capture_output=True, text=True,
                          env=dict(os.environ, GLOG_v="3"), timeout=600)


@pytest.mark.slow
def test_sigterm_checkpoints_every_rank_and_resume_is_exact(tmp_path):
    # SIGTERM to the launcher: it forwards the signal, the ranks agree on the step, each writes its
    # own state (RNG streams, replay buffer) and rank 0 the checkpoint; two resumes of that
    # checkpoint on two workers end with the same parameters, identical on both ranks.
    run = tmp_path / "run"
    proc = launch(run, 800, config=os.path.join(CONFIGS, "sac", "Pendulum-v1.yaml"), wait=False,
                  extra=SMALL_OFFPOLICY + ("--set", "checkpoint.freq=200", "--set", "algo.save_replay_buffer=true"))
    try:
        wait_for(str(run / "checkpoints" / "step-*.safetensors"))
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-3000:]
    assert f"continue with: msrl train --resume {run} --workers 2" in err, err
    ranks = [json.load(open(run / "ranks" / f"{r}.json")) for r in (0, 1)]
    assert [r["status"] for r in ranks] == ["interrupted"] * 2
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"] and ranks[0]["checkpoint"] == ranks[1]["checkpoint"]
    stopped = ranks[0]["checkpoint"]
    rank1 = ckpt.load_checkpoint(ckpt.rank_path(stopped, 1))[0]
    assert int(rank1["replay/pos_full"][0]) > 0  # rank 1's own buffer, beside rank 0's checkpoint
    # without a rank's own file the same worker count cannot resume exactly: refused, naming the file
    broken = tmp_path / "broken"
    shutil.copytree(run, broken)
    os.unlink(ckpt.rank_path(str(broken / "checkpoints" / os.path.basename(stopped)), 1))
    launched = (broken / "msrun_logs" / "msrun.log").read_text()
    r = resume(broken)
    assert r.returncode == 2 and "step-" in r.stderr and ".rank1.safetensors" in r.stderr, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert (broken / "msrun_logs" / "msrun.log").read_text() == launched  # refused before launching
    twin = tmp_path / "twin"
    shutil.copytree(run, twin)
    hashes = []
    for d in (run, twin):
        r = resume(d)
        assert r.returncode == 0, r.stderr[-3000:]
        ranks = [json.load(open(d / "ranks" / f"{k}.json")) for k in (0, 1)]
        assert all(k["status"] == "finished" and k["num_timesteps"] == 800 for k in ranks)
        assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"]
        hashes.append(ranks[0]["params_sha256"])
    assert hashes[0] == hashes[1]
    events = [json.loads(line).get("event") for line in open(run / "metrics.jsonl")]
    assert events.count("interrupted") == 1 and events.count("resumed") == 1 and events[-1] == "finished"


def test_split_rank_batch_needs_a_multiple_of_the_workers(tmp_path):
    r = subprocess.run([sys.executable, "-m", "msrl_consistent", "train", "sac/Pendulum-v1", "--workers", "3",
                        "--run-dir", str(tmp_path / "run"), "--set", "algo.batch_size=64"],
                       capture_output=True, text=True, env=dict(os.environ, GLOG_v="3"), timeout=300)
    assert r.returncode == 2
    assert "key 'algo.batch_size' has value 64, expected a multiple of the 3 workers" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_dead_worker_named_and_checkpoint_intact(algo, tmp_path):
    # checkpoint.keep is large so that no checkpoint is pruned while the test looks for one.
    run = tmp_path / "run"
    config = CONFIG if algo == "ppo" else os.path.join(CONFIGS, "sac", "Pendulum-v1.yaml")
    small = () if algo == "ppo" else SMALL_OFFPOLICY
    freq = 1024 if algo == "ppo" else 256  # a few PPO iterations; SAC steps cost one gradient step each
    proc = launch(run, 10 ** 6, extra=small + ("--set", f"checkpoint.freq={freq}", "--set", "checkpoint.keep=1000"),
                  wait=False, config=config)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not glob.glob(str(run / "checkpoints" / "step-*.safetensors")):
            time.sleep(0.5)
        assert glob.glob(str(run / "checkpoints" / "step-*.safetensors")), "no checkpoint written"
        pid = json.load(open(run / "ranks" / "1.json"))["pid"]
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    # msrun SIGKILLs rank 0 right after rank 1 died: rank 1 must be the one named as failed
    # (rank 0 may at most be reported as a consequence, after it).
    assert "rank 1 failed: exited first (killed by signal SIGKILL)" in err, err
    assert re.findall(r"rank (\d+)", err)[0] == "1", err
    assert "rank 0 failed" not in err, err
    newest = ckpt.newest_intact(str(run / "checkpoints"))
    assert newest is not None
    tensors, meta = ckpt.load_checkpoint(newest)
    assert meta["counters"]["num_timesteps"] >= freq


@pytest.mark.slow
def test_workers_run_the_launching_interpreter_not_the_first_python_on_path(tmp_path):
    # `/path/to/venv/bin/msrl train ... --workers 2` from a shell where that venv is
    # not activated: msrun starts `python` from PATH, here an interpreter without msrl_consistent
    # (and without mindspore): both ranks died with ModuleNotFoundError.
    fake = tmp_path / "other-python"
    fake.mkdir()
    (fake / "python").write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    (fake / "python").chmod(0o755)
    env = dict(os.environ, GLOG_v="3", PATH=os.pathsep.join([str(fake), "/usr/bin", "/bin"]))
    r = subprocess.run(["python", "-c", "import msrl_consistent"], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr  # the trap is armed
    run = tmp_path / "run"
    proc = launch(run, 1024, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.load(open(run / "ranks" / f"{r}.json")) for r in (0, 1)]
    assert all(r["status"] == "finished" for r in ranks)
