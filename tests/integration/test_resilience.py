"""Nothing lost: interrupts, resume, kept checkpoints, corrupt files, non-finite values,
unwritable targets."""
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import CONFIGS, copy_run_at_checkpoint, interrupt_when, train_run

from msrl_consistent import checkpoint as ckpt
from msrl_consistent.algorithms import PPO
from msrl_consistent.cli import main
from msrl_consistent.config import load_config
from msrl_consistent.export.exporter import export_run
from msrl_consistent.run_context import NonFiniteError, RunContext

SHORT = ["eval.freq=0", "eval.episodes=1", "env.n_envs=4", "algo.n_steps=64", "algo.batch_size=128",
         "algo.n_epochs=2"]


@pytest.fixture
def unwritable(tmp_path):
    """A directory this process cannot write into: immutable (root) or read-only (others)."""
    d = tmp_path / "ro"
    d.mkdir()
    (d / "keep.txt").write_text("before")
    made = []
    if os.geteuid() == 0 and shutil.which("chattr"):
        if subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode == 0:
            made.append(["chattr", "-i", str(d)])
    if not made and os.geteuid() != 0:
        d.chmod(0o500)
    try:
        (d / "probe").write_text("x")
        pytest.skip("cannot make an unwritable directory here (needs chattr as root, or a non-root user)")
    except OSError:
        pass
    yield d
    for cmd in made:
        subprocess.run(cmd)
    d.chmod(0o700)


@pytest.mark.slow
def test_two_resumes_from_the_same_checkpoint_are_identical(tmp_path):
    run, _, _ = train_run(tmp_path, "ppo/Pendulum-v1.yaml",
                          SHORT + ["total_timesteps=2048", "checkpoint.freq=512", "checkpoint.keep=5"], "base")
    # keep the step-1024 checkpoint as the newest one in two copies of the run
    hashes = []
    for name in ("r1", "r2"):
        d = copy_run_at_checkpoint(run, tmp_path / name, "step-000001024.safetensors")
        algo = PPO.resume(d)
        assert algo.num_timesteps == 1024 and algo.resumed_from.endswith("step-000001024.safetensors")
        summary = algo.learn(d, progress=False)
        assert summary["num_timesteps"] == 2048
        hashes.append(summary["params_sha256"])
    assert hashes[0] == hashes[1]
    events = [json.loads(line) for line in open(tmp_path / "r1" / "metrics.jsonl") if '"event"' in line]
    assert [e["event"] for e in events][-2:] == ["resumed", "finished"]


@pytest.mark.slow
def test_gsde_two_resumes_from_the_same_checkpoint_are_identical(tmp_path):
    # gSDE's exploration matrices come from the run's Generator (stored in checkpoints; drawn at
    # each rollout's start and every sde_sample_freq steps, and checkpoints fall between rollouts):
    # two resumes from the step-768 checkpoint end with the same parameters (docs/robustness.md's resume
    # promise: the envs are reseeded from (seed, steps done))
    overrides = ["eval.freq=0", "eval.episodes=1", "env.n_envs=3", "algo.n_steps=64", "algo.batch_size=64",
                 "algo.n_epochs=2", "algo.sde_sample_freq=5", "total_timesteps=1536", "checkpoint.freq=768",
                 "checkpoint.keep=5"]
    run, full, _ = train_run(tmp_path, "ppo/Pendulum-v1-gsde.yaml", overrides, "base")
    hashes = []
    for name in ("r1", "r2"):
        d = copy_run_at_checkpoint(run, tmp_path / name, "step-000000768.safetensors")
        algo = PPO.resume(d)
        assert algo.num_timesteps == 768 and tuple(algo.agent.log_std.shape) == (64, 1)
        summary = algo.learn(d, progress=False)
        assert summary["num_timesteps"] == 1536
        hashes.append(summary["params_sha256"])
    assert hashes[0] == hashes[1]
    # ... and the matrices matter: drawn only at each rollout's start, the parameters differ
    _, once, _ = train_run(tmp_path, "ppo/Pendulum-v1-gsde.yaml", overrides + ["algo.sde_sample_freq=-1"], "once")
    assert once["params_sha256"] != full["params_sha256"]


@pytest.mark.slow
def test_keep_last_k_checkpoints(tmp_path):
    run, _, _ = train_run(tmp_path, "ppo/CartPole-v1.yaml",
                          SHORT + ["total_timesteps=3072", "checkpoint.freq=256", "checkpoint.keep=2"], "k")
    files = sorted(os.listdir(os.path.join(run, "checkpoints")))
    assert files == ["final.safetensors", "step-000002560.safetensors", "step-000002816.safetensors"]


@pytest.mark.slow
def test_sigint_writes_checkpoint_exit_130_then_resume(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "msrl_consistent", "train", os.path.join(CONFIGS, "ppo", "CartPole-v1.yaml"),
           "--run-dir", str(run), "--total-timesteps", "6000", "--quiet"] + [f"--set={s}" for s in SHORT]
    env = dict(os.environ, GLOG_v="3")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = run / "metrics.jsonl"
    _, err = interrupt_when(proc, lambda: metrics.exists() and metrics.read_text().count("\n") >= 2, signal.SIGINT,
                            wait_s=120, timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "msrl train --resume" in err
    events = [json.loads(line) for line in open(run / "metrics.jsonl") if '"event"' in line]
    assert events[-1]["event"] == "interrupted" and events[-1]["signal"] == signal.SIGINT
    path = events[-1]["checkpoint"]
    tensors, meta = ckpt.load_checkpoint(path)
    assert 0 < meta["counters"]["num_timesteps"] < 6000
    assert not [f for f in os.listdir(run / "checkpoints") if ".tmp-" in f]
    rc = main(["train", "--resume", str(run), "--quiet"])
    assert rc == 0
    assert json.load(open(run / "summary.json"))["num_timesteps"] >= 6000
    assert main(["train", "--resume", str(run), "--quiet"]) == 0  # already finished: nothing to do


@pytest.mark.slow
def test_corrupt_checkpoint_names_newest_intact_and_resume_skips_it(tmp_path, capsys):
    run, _, _ = train_run(tmp_path, "ppo/CartPole-v1.yaml",
                          SHORT + ["total_timesteps=1024", "checkpoint.freq=256", "checkpoint.keep=5"], "c")
    cdir = os.path.join(run, "checkpoints")
    final = os.path.join(cdir, "final.safetensors")
    data = open(final, "rb").read()
    open(final, "wb").write(data[: len(data) // 2])  # truncated
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.load_checkpoint(final)
    assert "final.safetensors is truncated or corrupt" in str(e.value)
    assert "newest intact checkpoint is" in str(e.value) and "step-000000768" in str(e.value)
    # a half-written temporary file is never taken as the latest
    open(os.path.join(cdir, ".step-000009999.safetensors.tmp-1"), "wb").write(b"partial")
    assert ckpt.newest_intact(cdir).endswith("step-000000768.safetensors")
    algo = PPO.resume(run)
    assert algo.num_timesteps == 768
    assert main(["eval", run, "--checkpoint", final]) == 2
    assert "truncated or corrupt" in capsys.readouterr().err


def test_non_finite_parameter_stops_and_keeps_last_good_checkpoint(tmp_path):
    cfg = load_config(os.path.join(CONFIGS, "ppo", "CartPole-v1.yaml"), SHORT + ["total_timesteps=2048"])
    run = tmp_path / "nf"
    run.mkdir()
    algo = PPO(cfg)
    good = str(run / "checkpoints" / "step-000000000.safetensors")
    os.makedirs(run / "checkpoints")
    algo.save(good)
    before = open(good, "rb").read()
    w = algo.agent.actor.layers[0].weight
    arr = w.asnumpy()
    arr[0, 0] = np.nan
    from mindspore import Tensor
    w.set_data(Tensor(arr))
    with pytest.raises(NonFiniteError, match=r"non-finite .* at step 256"):
        algo.learn(str(run), progress=False)
    assert sorted(os.listdir(run / "checkpoints")) == ["step-000000000.safetensors"]
    assert open(good, "rb").read() == before
    events = [json.loads(line) for line in open(run / "metrics.jsonl") if '"event"' in line]
    assert events[-1]["event"] == "non_finite"


def test_checkpoint_into_unwritable_dir_keeps_previous(unwritable, cartpole_run):
    src = os.path.join(cartpole_run, "checkpoints", "final.safetensors")
    tensors, meta = ckpt.load_checkpoint(src)
    with pytest.raises(OSError):
        ckpt.save_checkpoint(str(unwritable / "keep.txt"), tensors, meta)
    assert (unwritable / "keep.txt").read_text() == "before"
    assert os.listdir(unwritable) == ["keep.txt"]


def test_export_into_unwritable_dir_keeps_previous(unwritable, cartpole_run, capsys):
    rc = main(["export", cartpole_run, "--out", str(unwritable / "new")])
    assert rc == 2
    assert "cannot write" in capsys.readouterr().err
    assert os.listdir(unwritable) == ["keep.txt"]


def test_disk_full_while_saving_keeps_previous(tmp_path, cartpole_run, monkeypatch):
    src = os.path.join(cartpole_run, "checkpoints", "final.safetensors")
    dst = tmp_path / "c.safetensors"
    shutil.copy(src, dst)
    before = dst.read_bytes()
    tensors, meta = ckpt.load_checkpoint(src)
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        ckpt.save_checkpoint(str(dst), tensors, meta)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert dst.read_bytes() == before
    assert os.listdir(tmp_path) == ["c.safetensors"]


def test_export_replacing_existing_keeps_old_on_failure(cartpole_run, tmp_path, monkeypatch):
    out = tmp_path / "exp"
    export_run(cartpole_run, str(out), golden=16)
    manifest = (out / "manifest.json").read_text()
    import msrl_consistent.export.exporter as exporter

    def broken(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(exporter, "golden_observations", broken)
    with pytest.raises(OSError):
        export_run(cartpole_run, str(out), golden=16, force=True)
    assert (out / "manifest.json").read_text() == manifest
    assert sorted(os.listdir(tmp_path)) == ["exp"]


@pytest.mark.slow
def test_soak_20_interrupt_resume_cycles(tmp_path, monkeypatch):
    """20 cycles of: resume, train until a real SIGTERM arrives, checkpoint; then finish."""
    cfg = load_config(os.path.join(CONFIGS, "ppo", "CartPole-v1.yaml"),
                      SHORT + ["total_timesteps=12288", "algo.n_epochs=1"])
    run = tmp_path / "soak"
    run.mkdir()
    from msrl_consistent.checkpoint import atomic_write_text
    from msrl_consistent.config import dump_config
    atomic_write_text(str(run / "config.yaml"), dump_config(cfg))
    original = RunContext.after_iteration

    def interrupting(self, stats):
        if not getattr(self, "_sent", False):
            self._sent = True
            signal.raise_signal(signal.SIGTERM)  # delivered to the training's own handler
        return original(self, stats)
    monkeypatch.setattr(RunContext, "after_iteration", interrupting)
    interrupted = 0
    algo = PPO(cfg)
    for cycle in range(20):
        rc = None
        from msrl_consistent.cli_train import _learn
        rc = _learn(algo, str(run), True, "")
        assert rc == 143, f"cycle {cycle}: {rc}"
        interrupted += 1
        algo = PPO.resume(str(run))
    monkeypatch.setattr(RunContext, "after_iteration", original)
    summary = algo.learn(str(run), progress=False)
    assert interrupted == 20 and summary["num_timesteps"] == 12288
    tensors, meta = ckpt.load_checkpoint(str(run / "checkpoints" / "final.safetensors"))
    assert meta["counters"]["num_timesteps"] == 12288
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    events = [json.loads(line)["event"] for line in open(run / "metrics.jsonl") if '"event"' in line]
    assert events.count("interrupted") == 20 and events.count("resumed") == 20


@pytest.mark.slow
def test_a_run_directory_is_trained_by_one_process_at_a_time(tmp_path):
    # A scheduler restarts a job whose old process is still alive: the second `msrl train --resume`
    # is refused naming the holder; once the holder is SIGKILLed, --resume just works.
    import socket

    from msrl_consistent.config import ConfigError
    from msrl_consistent.runlock import LOCK_FILE
    from msrl_consistent.training import train
    run = str(tmp_path / "run")
    sets = [a for s in SHORT + ["checkpoint.freq=256", "log.tensorboard=false"] for a in ("--set", s)]
    env = dict(os.environ, GLOG_v="3")
    cmd = [sys.executable, "-m", "msrl_consistent", "train", os.path.join(CONFIGS, "ppo/CartPole-v1.yaml"),
           "--run-dir", run, "--total-timesteps", "100000", "--quiet"] + sets
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 240
        while not (os.path.isdir(os.path.join(run, "checkpoints")) and ckpt.newest_intact(os.path.join(run, "checkpoints"))):
            assert first.poll() is None and time.time() < deadline, first.communicate()
            time.sleep(0.5)
        second = subprocess.run([sys.executable, "-m", "msrl_consistent", "train", "--resume", run, "--quiet"],
                                env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 2, second.stdout + second.stderr
        err = [ln for ln in second.stderr.splitlines() if ln.strip()]
        assert len(err) == 1 and err[0].startswith("msrl: error: run directory "), second.stderr
        assert f"PID {first.pid} on host {socket.gethostname()}" in err[0]
        with pytest.raises(ConfigError, match=f"PID {first.pid}"):  # the Python API's learn is refused too
            PPO.resume(run).learn(run, progress=False)
        with pytest.raises(ConfigError, match="not empty"):
            train("ppo/CartPole-v1", run_dir=run)
        events = [json.loads(ln).get("event") for ln in open(os.path.join(run, "metrics.jsonl"))]
        assert "resumed" not in events  # the refused processes wrote nothing
    finally:
        first.kill()  # SIGKILL: no handler runs, the kernel drops the lock
        first.wait()
    assert os.path.isfile(os.path.join(run, LOCK_FILE))  # a stale record, no lock: nothing to clean up
    small = [sys.executable, "-c", "import sys, yaml; p = sys.argv[1]; c = yaml.safe_load(open(p)); "
             "c['total_timesteps'] = 2048; open(p, 'w').write(yaml.safe_dump(c))", os.path.join(run, "config.yaml")]
    subprocess.run(small, check=True)
    again = subprocess.run([sys.executable, "-m", "msrl_consistent", "train", "--resume", run, "--quiet"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert os.path.isfile(os.path.join(run, "summary.json"))


@pytest.mark.slow
def test_sigterm_during_an_evaluation_stops_it_at_the_next_step(tmp_path):
    """An evaluation that would run for minutes (Pendulum with a time limit of a million steps) is
    abandoned at the next step of a SIGTERM: checkpoint, `interrupted` event, exit 143, as in
    training; eval.max_steps caps such an evaluation."""
    run = tmp_path / "run"
    sets = ["eval.freq=0", "eval.episodes=2", "env.n_envs=4", "algo.n_steps=64", "algo.batch_size=128",
            "algo.n_epochs=1", "env.max_episode_steps=1000000"]
    cmd = [sys.executable, "-m", "msrl_consistent", "train", os.path.join(CONFIGS, "ppo", "Pendulum-v1.yaml"),
           "--run-dir", str(run), "--total-timesteps", "512", "--quiet"] + [f"--set={s}" for s in sets]
    proc = subprocess.Popen(cmd, env=dict(os.environ, GLOG_v="3"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    metrics = run / "metrics.jsonl"

    def evaluating():  # both updates logged: the final evaluation has started (it logs nothing until it ends)
        if not metrics.exists() or metrics.read_text().count('"kind": "train"') < 2:
            return False
        time.sleep(3.0)
        return True
    t0 = time.monotonic()
    _, err = interrupt_when(proc, evaluating, signal.SIGTERM, wait_s=120, timeout=60)
    assert proc.returncode == 143, err[-2000:]
    events = [json.loads(line) for line in open(metrics) if '"event"' in line]
    assert events[-1]["event"] == "interrupted" and events[-1]["signal"] == signal.SIGTERM
    assert time.monotonic() - t0 < 100  # not the minutes the evaluation would have taken
    # eval.max_steps caps such an evaluation, and the results say so
    _, summary, _ = train_run(tmp_path, "ppo/Pendulum-v1.yaml", sets + ["total_timesteps=256", "eval.max_steps=50"],
                              "capped")
    final = summary["final_eval"]
    assert final["mean_length"] == 50.0 and final["max_steps"] == 50.0 and final["capped"] == 2.0
