"""Several hosts as msrun nodes (``msrl train --nodes M --node-rank R --master-addr HOST``), run as
two launcher processes on 127.0.0.1 sharing one run directory: the parameters of one host's
launch, signals and resume across nodes, a dead worker on another node, and the flags' errors."""
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest
from test_distributed import CONFIG, CONFIGS, SMALL_OFFPOLICY, free_port, launch, resume, wait_for

from msrl_consistent import checkpoint as ckpt


def node_cmd(node_rank, port, *args, nodes=2):
    """``msrl ... --workers 2 --nodes 2 --node-rank R`` on 127.0.0.1: one node of a two-host launch."""
    return [sys.executable, "-m", "msrl_consistent", *args, "--workers", "2", "--nodes", str(nodes), "--node-rank",
            str(node_rank), "--master-addr", "127.0.0.1", "--master-port", str(port), "--quiet"]


@contextlib.contextmanager
def nodes(port, *args, node_args=((), ())):
    """Both nodes started at once (separate processes, as on two hosts; ``node_args[r]`` added to
    node r's command); any still running after the block is killed."""
    procs = [subprocess.Popen(node_cmd(r, port, *args, *node_args[r]), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=dict(os.environ, GLOG_v="3")) for r in (0, 1)]
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def run_nodes(*args, port=None, node_args=((), ())):
    """Both nodes to their end: their (returncode, stderr)."""
    with nodes(port or free_port(), *args, node_args=node_args) as procs:
        errs = [p.communicate(timeout=600)[1] for p in procs]
    return [(p.returncode, err) for p, err in zip(procs, errs)]


def rank_hashes(run):
    ranks = [json.load(open(run / "ranks" / f"{r}.json")) for r in (0, 1)]
    assert all(r["status"] == "finished" for r in ranks), ranks
    return [r["params_sha256"] for r in ranks]


@pytest.mark.parametrize("flags, message", [
    (["--workers", "3", "--nodes", "2", "--master-addr", "h"], "--workers 3 --nodes 2: expected a number of workers "
                                                                "divisible by the 2 nodes"),
    (["--workers", "2", "--nodes", "2", "--node-rank", "2", "--master-addr", "h"], "--node-rank 2: expected 0 to 1"),
    (["--workers", "2", "--nodes", "2", "--node-rank", "1"], "--nodes 2: needs --master-addr HOST"),
    (["--workers", "2", "--node-rank", "1"], "--node-rank 1 needs --nodes M"),
    (["--nodes", "1", "--seeds", "0-1"], "--nodes 1 with --seeds 0-1: a population trains on one host"),
    (["--workers", "2", "--nodes", "2", "--master-addr", "h"], "--nodes 2: needs --run-dir DIR"),
])
def test_node_flags_refused_in_one_line(flags, message, tmp_path):
    r = subprocess.run([sys.executable, "-m", "msrl_consistent", "train", "ppo/CartPole-v1", *flags],
                       capture_output=True, text=True, env=dict(os.environ, GLOG_v="3"), timeout=300, cwd=tmp_path)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1 and not os.listdir(tmp_path)


@pytest.mark.slow
def test_two_nodes_on_one_machine_match_one_host(tmp_path):
    # node 0 and node 1 as two launches on 127.0.0.1 sharing one run directory: the same
    # parameters on both ranks as one host's --workers 2 of the same config and seed
    run = tmp_path / "nodes"
    args = ("train", CONFIG, "--run-dir", str(run), "--total-timesteps", "1024", "--set", "eval.freq=0", "--set",
            "eval.episodes=1")
    for rc, err in run_nodes(*args):
        assert rc == 0, err[-3000:]
    two = rank_hashes(run)
    one = tmp_path / "one"
    proc = launch(one, 1024)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert two[0] == two[1] == rank_hashes(one)[0] == json.load(open(run / "summary.json"))["params_sha256"]
    dist = json.load(open(run / "summary.json"))["distributed"]
    assert dist["nodes"] == 2 and dist["workers"] == 2 and dist["node_rank"] == 0 and dist["deterministic"] == "ON"
    assert dist["env"]["HCCL_DETERMINISTIC"] == "true"
    assert json.load(open(one / "summary.json"))["distributed"]["nodes"] == 1
    # each node's own logs; node 0 alone wrote the run's files and ran the scheduler
    assert sorted(os.listdir(run / "msrun_logs")) == ["node0", "node1"]
    assert (run / "msrun_logs" / "node0" / "worker_0.log").is_file() and (run / "msrun_logs" / "node1" / "worker_1.log").is_file()
    assert not (run / "msrun_logs" / "node1" / "scheduler.log").exists()
    assert (run / ".msrl-train.lock").is_file() and (run / ".msrl-train.node1.lock").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("algo, env_id", [("dqn", "CartPole-v1"), ("sac", "Pendulum-v1")])
def test_offpolicy_two_nodes_match_one_host(algo, env_id, tmp_path):
    # each rank's own replay buffer and batches, on two nodes as on one host
    config = os.path.join(CONFIGS, algo, f"{env_id}.yaml")
    small = SMALL_OFFPOLICY + (("--set", "algo.train_freq=50", "--set", "algo.gradient_steps=10") if algo == "dqn" else ())
    run = tmp_path / "nodes"
    for rc, err in run_nodes("train", config, "--run-dir", str(run), "--total-timesteps", "400", "--set",
                             "eval.freq=0", "--set", "eval.episodes=1", *small):
        assert rc == 0, err[-3000:]
    one = tmp_path / "one"
    proc = launch(one, 400, config=config, extra=small)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = rank_hashes(run)
    assert two[0] == two[1] == rank_hashes(one)[0]


@pytest.mark.slow
def test_sigterm_to_one_node_stops_both_and_two_node_resume_is_exact(tmp_path):
    # SIGTERM to node 1's launcher: its worker sees the signal, every rank stops at the same step
    # and checkpoints, both launchers exit 143 naming their own resume command; resumed on two
    # nodes, the run ends with the parameters a one-host resume of the same checkpoint ends with
    run = tmp_path / "run"
    port = free_port()
    args = ("train", CONFIG, "--run-dir", str(run), "--total-timesteps", "16384", "--set", "eval.freq=0", "--set",
            "eval.episodes=1", "--set", "checkpoint.freq=2048")
    with nodes(port, *args) as procs:
        wait_for(str(run / "checkpoints" / "step-*.safetensors"))
        procs[1].send_signal(signal.SIGTERM)
        errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [143, 143], errs
    for r, err in enumerate(errs):
        assert (f"continue with: msrl train --resume {run} --workers 2 --nodes 2 --node-rank {r} --master-addr "
                f"127.0.0.1 --master-port {port}") in err, err
    ranks = [json.load(open(run / "ranks" / f"{r}.json")) for r in (0, 1)]
    assert [r["status"] for r in ranks] == ["interrupted"] * 2 and ranks[0]["checkpoint"] == ranks[1]["checkpoint"]
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"]
    twin = tmp_path / "twin"
    shutil.copytree(run, twin)
    for rc, err in run_nodes("train", "--resume", str(run)):
        assert rc == 0, err[-3000:]
    r = resume(twin)
    assert r.returncode == 0, r.stderr[-3000:]
    two, one = rank_hashes(run), rank_hashes(twin)
    assert two[0] == two[1] == one[0]
    assert json.load(open(run / "summary.json"))["num_timesteps"] == 16384
    events = [json.loads(line).get("event") for line in open(run / "metrics.jsonl")]
    assert events.count("interrupted") == 1 and events.count("resumed") == 1 and events[-1] == "finished"


@pytest.mark.slow
def test_dead_worker_on_one_node_named_by_both(tmp_path):
    # rank 1 (node 1's worker) SIGKILLed: node 1's launcher names it from its msrun; node 0's
    # worker fails in the next collective and its launcher names rank 1 from the scheduler first
    run = tmp_path / "run"
    port = free_port()
    args = ("train", CONFIG, "--run-dir", str(run), "--total-timesteps", str(10 ** 6), "--set", "eval.freq=0", "--set",
            "eval.episodes=1", "--set", "checkpoint.freq=2048", "--set", "checkpoint.keep=1000")
    with nodes(port, *args) as procs:
        wait_for(str(run / "checkpoints" / "step-*.safetensors"))
        os.kill(json.load(open(run / "ranks" / "1.json"))["pid"], signal.SIGKILL)
        errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [1, 1], errs
    assert "rank 1 failed: exited first (killed by signal SIGKILL)" in errs[1], errs[1]
    assert "rank 1 failed: the worker stopped responding (on another node" in errs[0], errs[0]
    assert re.findall(r"rank (\d+)", errs[0])[0] == "1", errs[0]
    assert ckpt.newest_intact(str(run / "checkpoints")) is not None


@pytest.mark.slow
def test_a_node_with_another_seed_fails_the_launch_naming_its_rank(tmp_path):
    run = tmp_path / "run"
    results = run_nodes("train", CONFIG, "--run-dir", str(run), "--total-timesteps", "1024",
                        node_args=((), ("--seed", "7")))
    assert [rc for rc, _ in results] == [1, 1], results
    for _, err in results:
        assert "rank(s) [1] resolved another config than rank 0" in err, err
    assert not (run / "checkpoints").exists() or not os.listdir(run / "checkpoints")
