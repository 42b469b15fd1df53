"""Data-parallel training on MindSpore's own distributed engine (msrun; HCCL on Ascend, the
CPU collective backend on this machine).

``msrl train CONFIG --workers N`` re-launches itself through ``msrun`` with N workers. Each
worker calls ``mindspore.communication.init()``; ranks step their own vector envs seeded from
(seed, rank); gradients are averaged inside the compiled update step with
``nn.DistributedGradReducer`` so parameters stay identical on every rank; observation
normalization statistics are gathered from all ranks and merged in rank order (identical on
every rank); rank 0 alone writes checkpoints, logs and metrics, and every rank writes
``ranks/<rank>.json`` with its final parameter sha256, steps and steps/s.

Multi-host (documented in the README): run the same ``msrun`` command on every node with
``--worker_num`` (all workers), ``--local_worker_num`` (this node's), ``--master_addr``,
``--master_port`` and ``--node_rank``.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

WORKER_ENV = "MSRL_WORKER"


@dataclass
class Dist:
    rank: int = 0
    world: int = 1

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def allgather(self, arr: np.ndarray) -> np.ndarray:
        """Every rank's ``arr`` stacked in rank order, shape (world, *arr.shape), float32."""
        if not self.enabled:
            return np.asarray(arr, np.float32)[None]
        from mindspore import Tensor
        flat = np.asarray(arr, np.float32).reshape(1, -1)
        out = _gather_cell()(Tensor(flat)).asnumpy()
        return out.reshape((self.world,) + np.shape(arr))


_GATHER = {}


def _gather_cell():
    if "cell" not in _GATHER:
        from mindspore import nn, ops

        class AllGather(nn.Cell):
            def __init__(self):
                super().__init__()
                self.gather = ops.AllGather()

            def construct(self, x):
                return self.gather(x)

        _GATHER["cell"] = AllGather()
    return _GATHER["cell"]


_DIST = {"dist": Dist()}


def current() -> Dist:
    return _DIST["dist"]


def init_if_worker() -> Dist:
    """In an msrun worker (MSRL_WORKER set by the launcher): init communication, return the rank."""
    if not os.environ.get(WORKER_ENV):
        return _DIST["dist"]
    from mindspore.communication import get_group_size, get_rank, init
    init()
    _DIST["dist"] = Dist(rank=int(get_rank()), world=int(get_group_size()))
    return _DIST["dist"]


def msrun_command(entry: str, entry_args: List[str], workers: int, master_port: int, log_dir: str,
                  local_workers: Optional[int] = None, master_addr: str = "127.0.0.1", node_rank: int = 0,
                  msrun: str = "msrun") -> List[str]:
    """The msrun command line (one node of a possibly multi-node launch)."""
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    return [msrun, f"--worker_num={workers}", f"--local_worker_num={local_workers or workers}",
            f"--master_addr={master_addr}", f"--master_port={master_port}", f"--node_rank={node_rank}",
            f"--log_dir={log_dir}", "--join=True", "--cluster_time_out=120", entry] + list(entry_args)


ENTRY = "import sys\nfrom msrl_consistent.entry import main\nsys.exit(main())\n"


def find_msrun() -> str:
    exe = shutil.which("msrun")
    if exe is None:
        candidate = os.path.join(os.path.dirname(sys.executable), "msrun")
        if os.path.isfile(candidate):
            return candidate
        raise FileNotFoundError("msrun (installed with mindspore) is not on PATH")
    return exe


def failed_ranks(log_dir: str) -> List[dict]:
    """Ranks whose worker log shows a Python traceback or an exit, with the last error line."""
    out = []
    for path in sorted(glob.glob(os.path.join(log_dir, "worker_*.log"))):
        m = re.search(r"worker_(\d+)\.log$", path)
        text = open(path, "r", errors="replace").read()
        if "Traceback (most recent call last)" in text or "WorkerDied" in text:
            lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("[WARNING]")
                     and not ln.startswith("[INFO]")]
            err = next((ln for ln in reversed(lines) if re.match(r"^\w*(Error|Exception|SystemExit|KeyboardInterrupt)", ln)),
                       lines[-1] if lines else "")
            out.append({"rank": int(m.group(1)), "error": err.strip()})
    # A worker killed without a Python error (SIGKILL, OOM killer) leaves no traceback; the
    # msrun scheduler reports it as timed out.
    sched = os.path.join(log_dir, "scheduler.log")
    if os.path.isfile(sched):
        known = {b["rank"] for b in out}
        text = open(sched, "r", errors="replace").read()
        for r in sorted({int(x) for x in re.findall(r"The node: (\d+) is timed out", text)} - known):
            out.append({"rank": r, "error": "the worker stopped responding (killed, or crashed without a Python error)"})
    return out


def launch(entry_args: List[str], workers: int, run_dir: str, master_port: int) -> int:
    """Run msrun with ``workers`` local workers executing ``msrl <entry_args>``; non-zero exit
    names the failed rank(s) and where their logs are."""
    msrun = find_msrun()
    log_dir = os.path.join(run_dir, "msrun_logs")
    os.makedirs(log_dir, exist_ok=True)
    entry = os.path.join(run_dir, ".msrun_entry.py")
    with open(entry, "w") as fh:
        fh.write(ENTRY)
    cmd = msrun_command(entry, entry_args, workers, master_port, log_dir, msrun=msrun)
    env = dict(os.environ, **{WORKER_ENV: "1"})
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode == 0:
        return 0
    bad = failed_ranks(log_dir)
    if bad:
        detail = "; ".join(f"rank {b['rank']} failed: {b['error']}" for b in bad)
    else:
        detail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"msrun exit code {proc.returncode}"
    print(f"msrl: error: distributed training failed: {detail} (logs: {log_dir})", file=sys.stderr)
    return 1
