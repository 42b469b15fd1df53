"""This launcher's place in an msrun cluster of one or several hosts (``msrl train --workers N
--nodes M --node-rank R --master-addr HOST``).

Every node runs the same command with its own ``--node-rank``; msrun starts the node's N/M
workers as ranks R*N/M ... (R+1)*N/M - 1, and node 0's msrun the scheduler at HOST:PORT. The run
directory may be one directory on a shared filesystem: node 0 writes the run's files (config.yaml,
checkpoints, metrics, summary.json) and holds the run lock; every other node holds a lock of
its own (``.msrl-train.node<R>.lock``, so two launches of one node are refused while the nodes
share the directory) and keeps its msrun and worker logs, its entry script and its copy of the
config in ``msrun_logs/node<R>/``. The launcher forwards signals to, deletes the stale status
files of, and reads the pids of its own ranks only: a pid in another node's ``ranks/<rank>.json``
belongs to another host.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from typing import List, Optional

from .config import ConfigError
from .runlock import LOCK_FILE

CLUSTER_ENV = "MSRL_CLUSTER"
"""Set by the launcher for its workers: the cluster's description (JSON), for summary.json."""
LOG_DIR = "msrun_logs"
_NODE_LOCK = re.compile(r"^\.msrl-train\.node\d+\.lock$")


@dataclass(frozen=True)
class Cluster:
    """``workers`` ranks in all, on ``nodes`` hosts of which this launcher is ``node_rank``."""
    workers: int
    nodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 8118

    @property
    def local_workers(self) -> int:
        return self.workers // self.nodes

    @property
    def ranks(self) -> range:
        """The global ranks of this node's workers (msrun's numbering with ``--node_rank``)."""
        return range(self.node_rank * self.local_workers, (self.node_rank + 1) * self.local_workers)

    def log_dir(self, run_dir: str) -> str:
        """msrun's and this node's workers' logs: ``msrun_logs`` on one host, else ``msrun_logs/node<R>``."""
        base = os.path.join(run_dir, LOG_DIR)
        return base if self.nodes == 1 else os.path.join(base, f"node{self.node_rank}")

    @property
    def lock_file(self) -> str:
        """The run lock's file name: node 0's is the run's own, another node's its own name."""
        return LOCK_FILE if self.node_rank == 0 else f".msrl-train.node{self.node_rank}.lock"

    def flags(self) -> List[str]:
        """The ``msrl train`` flags that launch this node again (the resume hint)."""
        out = ["--workers", str(self.workers)]
        if self.nodes > 1:
            out += ["--nodes", str(self.nodes), "--node-rank", str(self.node_rank), "--master-addr",
                    self.master_addr, "--master-port", str(self.master_port)]
        return out

    def env(self) -> dict:
        """The workers' environment entry that describes the cluster (read by :func:`launched`)."""
        return {CLUSTER_ENV: json.dumps(asdict(self))}


def launched() -> Optional[dict]:
    """In a worker: the launcher's cluster description (``CLUSTER_ENV``), else None."""
    text = os.environ.get(CLUSTER_ENV)
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def from_args(args) -> Cluster:
    """The cluster of ``msrl train``'s ``--workers/--nodes/--node-rank/--master-addr/--master-port``;
    ConfigError (one line, exit 2) naming the flag, its value and what was expected."""
    nodes, rank, addr = getattr(args, "nodes", None), getattr(args, "node_rank", None), getattr(args, "master_addr", None)
    if nodes is None:
        if rank is not None or addr is not None:
            flag = f"--node-rank {rank}" if rank is not None else f"--master-addr {addr}"
            raise ConfigError(f"{flag} needs --nodes M (the number of hosts)")
        return Cluster(args.workers, master_port=args.master_port)
    if getattr(args, "seeds", None) is not None:
        raise ConfigError(f"--nodes {nodes} with --seeds {args.seeds}: a population trains on one host "
                          f"(--jobs J spreads its members over processes)")
    if nodes < 1:
        raise ConfigError(f"--nodes {nodes}: expected a positive number of hosts")
    if args.workers % nodes:
        raise ConfigError(f"--workers {args.workers} --nodes {nodes}: expected a number of workers divisible by "
                          f"the {nodes} nodes (each runs --workers / --nodes of them)")
    rank = 0 if rank is None else rank
    if not 0 <= rank < nodes:
        raise ConfigError(f"--node-rank {rank}: expected 0 to {nodes - 1} (--nodes {nodes})")
    if nodes > 1 and not addr:
        raise ConfigError(f"--nodes {nodes}: needs --master-addr HOST (node 0's address, the same on every node)")
    return Cluster(args.workers, nodes, rank, addr or "127.0.0.1", args.master_port)


def run_entries(run_dir: str) -> set:
    """The entries of ``run_dir`` other than the run locks and the other nodes' log directories
    (what node 0 finds in a new run directory that another node joined first)."""
    names = {n for n in os.listdir(run_dir) if n != LOCK_FILE and not _NODE_LOCK.match(n)}
    logs = os.path.join(run_dir, LOG_DIR)
    if LOG_DIR in names and all(re.match(r"^node\d+$", n) for n in os.listdir(logs)):
        names.discard(LOG_DIR)
    return names


WORKERS_ONLY = """import sys
# msrun on a node other than node 0: this node's workers only. msrun starts a scheduler on every
# host that owns --master_addr, so a second node on node 0's host (two nodes on 127.0.0.1) would
# start a second scheduler on the same port, fail to bind and fail the launch; the scheduler is
# node 0's.
try:
    from mindspore.parallel.cluster.process_entity import _api
    _api._is_local_ip = lambda address: False
except (ImportError, AttributeError):
    pass
from mindspore.parallel.cluster.run import main
sys.argv[0] = "msrun"
sys.exit(main())
"""


def msrun_prefix(cluster: Cluster, msrun: str, python: str) -> List[str]:
    """What starts msrun on this node: ``msrun`` itself on node 0, else msrun's own ``main`` without
    the scheduler (WORKERS_ONLY) under ``python``."""
    return [msrun] if cluster.node_rank == 0 else [python, "-c", WORKERS_ONLY]
