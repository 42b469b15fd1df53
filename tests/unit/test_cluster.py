"""A launcher's place in a cluster of several hosts: its ranks, files, lock, resume flags, and
the pids and environment it hands to its own workers only."""
import json
import os

from msrl_consistent.cluster import Cluster, run_entries
from msrl_consistent.distributed import _rank_pids, worker_env


def test_node_ranks_files_and_flags(tmp_path):
    c = Cluster(4, nodes=2, node_rank=1, master_addr="10.0.0.1", master_port=9000)
    assert c.local_workers == 2 and list(c.ranks) == [2, 3]  # msrun's numbering with --node_rank
    assert c.log_dir("R") == os.path.join("R", "msrun_logs", "node1") and c.lock_file == ".msrl-train.node1.lock"
    assert c.flags() == ["--workers", "4", "--nodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1",
                         "--master-port", "9000"]
    one = Cluster(2)
    assert list(one.ranks) == [0, 1] and one.log_dir("R") == os.path.join("R", "msrun_logs")
    assert one.lock_file == ".msrl-train.lock" and one.flags() == ["--workers", "2"]


def test_node_0_ignores_what_other_nodes_put_in_a_new_run_directory(tmp_path):
    (tmp_path / ".msrl-train.node1.lock").write_text("")
    (tmp_path / "msrun_logs" / "node1").mkdir(parents=True)
    assert run_entries(str(tmp_path)) == set()
    (tmp_path / "msrun_logs" / "msrun.log").write_text("")  # a one-host run's logs: not another node's
    (tmp_path / "config.yaml").write_text("")
    assert run_entries(str(tmp_path)) == {"msrun_logs", "config.yaml"}


def test_a_node_reads_the_pids_of_its_own_ranks_only(tmp_path):
    for rank, pid in ((0, 100), (1, 200), (2, 300)):
        (tmp_path / f"{rank}.json").write_text(json.dumps({"rank": rank, "pid": pid}))
    assert _rank_pids(str(tmp_path), range(1, 2)) == {200: 1}
    assert _rank_pids(str(tmp_path)) == {100: 0, 200: 1, 300: 2}


def test_workers_get_deterministic_hccl():
    assert worker_env({"PATH": "/bin"})["HCCL_DETERMINISTIC"] == "true"
    assert worker_env({"PATH": "/bin", "HCCL_DETERMINISTIC": "strict"})["HCCL_DETERMINISTIC"] == "strict"
