"""How the launcher names a dead data-parallel worker on synthetic msrun logs.

msrun polls its workers once a second and SIGKILLs all the others as soon as one exits
non-zero; the scheduler then reports whichever worker's heartbeat lapses first, which may be
a worker msrun killed, not the one that died. The launcher used to name the rank from that
report, so the dead-worker test named rank 0 now and then. Also: the ranks' own checkpoint
files beside rank 0's."""
import json
import os
import sys

import numpy as np

from msrl_consistent import checkpoint as ckpt
from msrl_consistent.distributed import MSRUN_LOG, entry_script, failed_ranks, worker_env


def write_logs(tmp_path, scheduler_node, msrun_pid=4242, worker_tracebacks=None):
    logs = tmp_path / "msrun_logs"
    ranks = tmp_path / "ranks"
    logs.mkdir()
    ranks.mkdir()
    for rank, pid in ((0, 4241), (1, 4242)):
        (ranks / f"{rank}.json").write_text(json.dumps({"rank": rank, "world": 2, "pid": pid, "status": "running"}))
        (logs / f"worker_{rank}.log").write_text((worker_tracebacks or {}).get(rank, ""))
    (logs / MSRUN_LOG).write_text(
        "Start worker process with rank id:0, log file:worker_0.log.\n"
        f"[ERROR] ME(1:2,MainProcess):2026-01-01 [mindspore/parallel/cluster/process_entity/_api.py:365] Worker "
        f"process {msrun_pid} exit with exception. Error code: -9.\n")
    (logs / "scheduler.log").write_text(
        f"[ERROR] DISTRIBUTED(1,2,python):2026 [meta_server_node.cc:548] UpdateTopoState] The node: {scheduler_node} "
        "is timed out. It may exit with exception, please check this node's log.\n")
    return str(logs), str(ranks)


def test_the_worker_msrun_saw_die_is_named_not_the_scheduler_guess(tmp_path):
    logs, ranks = write_logs(tmp_path, scheduler_node=0)  # the race outcome of the flaky run
    bad = failed_ranks(logs, ranks)
    assert bad == [{"rank": 1, "error": "exited first (killed by signal SIGKILL)"}]


def test_traceback_of_the_first_dead_worker_is_its_detail(tmp_path):
    tb = "Traceback (most recent call last):\n  File \"x\", line 1\nValueError: boom\n"
    logs, ranks = write_logs(tmp_path, scheduler_node=0, msrun_pid=4241, worker_tracebacks={0: tb})
    bad = failed_ranks(logs, ranks)
    assert bad == [{"rank": 0, "error": "exited first (killed by signal SIGKILL): ValueError: boom"}]


def test_scheduler_only_when_nothing_else_names_a_rank(tmp_path):
    logs, _ = write_logs(tmp_path, scheduler_node=1)
    os.remove(os.path.join(logs, MSRUN_LOG))
    assert [b["rank"] for b in failed_ranks(logs, None)] == [1]


def test_node_0_names_another_nodes_rank_the_scheduler_lost_first(tmp_path):
    # two hosts, rank 1 on node 1 killed: node 0's msrun sees only its own rank 0 fail (in a
    # collective, ~30 s later); its scheduler names rank 1, which comes first
    err = "Traceback (most recent call last):\nRuntimeError: The state of the cluster is error\n"
    logs, ranks = write_logs(tmp_path, scheduler_node=1, msrun_pid=4241, worker_tracebacks={0: err})
    os.remove(os.path.join(logs, "worker_1.log"))  # node 1's log is in node 1's directory
    bad = failed_ranks(logs, ranks, ranks=range(0, 1))
    assert [b["rank"] for b in bad] == [1, 0] and "on another node" in bad[0]["error"]
    assert "The state of the cluster is error" in bad[1]["error"]


def test_a_workers_one_line_error_is_its_detail(tmp_path):
    logs, ranks = write_logs(tmp_path, scheduler_node=0, msrun_pid=4241, worker_tracebacks={0: "msrl: error: boom\n"})
    assert failed_ranks(logs, ranks)[0] == {"rank": 0, "error": "exited first (killed by signal SIGKILL): boom"}


def test_worker_env_and_entry_use_the_launching_interpreter():
    env = worker_env({"PATH": "/usr/bin:/bin"}, python="/venv/bin/python")
    assert env["PATH"].split(os.pathsep)[0] == "/venv/bin" and env["MSRL_WORKER"] == "1"
    text = entry_script()
    compile(text, ".msrun_entry.py", "exec")
    assert repr(sys.executable) in text and repr(sys.prefix) in text


def test_pruning_a_checkpoint_removes_its_ranks_files_and_keeps_the_newest(tmp_path):
    # each data-parallel rank > 0 keeps its RNG streams and replay buffer beside rank 0's checkpoint
    d = str(tmp_path)
    steps = [os.path.join(d, f"step-{s:09d}.safetensors") for s in (100, 200, 300)]
    for p in steps:
        ckpt.save_checkpoint(p, {"x": np.zeros(1, np.float32)}, {})
        for rank in (1, 2):
            os.makedirs(os.path.dirname(ckpt.rank_path(p, rank)), exist_ok=True)
            ckpt.save_checkpoint(ckpt.rank_path(p, rank), {"x": np.zeros(1, np.float32)}, {})
    assert ckpt.rank_path(steps[0], 2) == os.path.join(d, "ranks", "step-000000100.rank2.safetensors")
    assert ckpt.list_checkpoints(d) == steps  # the ranks' files are not checkpoints of their own
    ckpt.prune(d, keep=2)
    assert ckpt.list_checkpoints(d) == steps[1:]
    assert sorted(os.listdir(os.path.join(d, "ranks"))) == [
        "step-000000200.rank1.safetensors", "step-000000200.rank2.safetensors",
        "step-000000300.rank1.safetensors", "step-000000300.rank2.safetensors"]
