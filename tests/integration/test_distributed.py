"""Data-parallel PPO through msrun with CPU collectives: identical parameters on every rank,
reproducible launches, and a dead worker reported by rank with the last checkpoint intact."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from msrl_consistent import checkpoint as ckpt
from msrl_consistent.distributed import msrun_command

CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "configs", "ppo", "CartPole-v1.yaml")


def launch(run_dir, steps, port, extra=(), wait=True):
    cmd = [sys.executable, "-m", "msrl_consistent", "train", CONFIG, "--workers", "2", "--run-dir", str(run_dir),
           "--total-timesteps", str(steps), "--master-port", str(port), "--set", "eval.freq=0",
           "--set", "eval.episodes=1", "--quiet", *extra]
    env = dict(os.environ, GLOG_v="3")
    if wait:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_msrun_command():
    cmd = msrun_command("/r/.msrun_entry.py", ["train", "c.yaml"], 8, 8118, "/r/logs", local_workers=4,
                        master_addr="10.0.0.1", node_rank=1)
    assert cmd[:7] == ["msrun", "--worker_num=8", "--local_worker_num=4", "--master_addr=10.0.0.1",
                       "--master_port=8118", "--node_rank=1", "--log_dir=/r/logs"]
    assert cmd[-3:] == ["/r/.msrun_entry.py", "train", "c.yaml"]
    with pytest.raises(ValueError):
        msrun_command("e", [], 0, 1, "l")


def test_two_workers_identical_parameters_and_reproducible(tmp_path):
    hashes = []
    for i, port in enumerate((8131, 8132)):
        run = tmp_path / f"run{i}"
        proc = launch(run, 2048, port)
        assert proc.returncode == 0, proc.stderr[-3000:]
        ranks = [json.load(open(run / "ranks" / f"{r}.json")) for r in (0, 1)]
        assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"]
        assert all(r["status"] == "finished" and r["num_timesteps"] == 2048 for r in ranks)
        summary = json.load(open(run / "summary.json"))
        assert summary["params_sha256"] == ranks[0]["params_sha256"]
        assert (run / "checkpoints" / "final.safetensors").is_file()
        hashes.append(ranks[0]["params_sha256"])
    assert hashes[0] == hashes[1]


def test_dead_worker_named_and_checkpoint_intact(tmp_path):
    run = tmp_path / "run"
    proc = launch(run, 10 ** 6, 8133, extra=("--set", "checkpoint.freq=1024"), wait=False)
    try:
        deadline = time.time() + 300
        first = run / "checkpoints" / "step-000002048.safetensors"
        while time.time() < deadline and not first.exists():
            time.sleep(1)
        assert first.exists(), "no checkpoint written"
        pid = json.load(open(run / "ranks" / "1.json"))["pid"]
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "rank 1" in err, err[-2000:]
    newest = ckpt.newest_intact(str(run / "checkpoints"))
    assert newest is not None
    tensors, meta = ckpt.load_checkpoint(newest)
    assert meta["counters"]["num_timesteps"] >= 2048
