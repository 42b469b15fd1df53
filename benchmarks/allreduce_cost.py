"""Cost of one CPU AllReduce between msrun workers, as the data-parallel update runs it.

    python benchmarks/allreduce_cost.py --workers 2

Launches itself through msrun with N local workers; each times 200 graph calls of a cell that
all-reduces a float32 vector of 1 and of 100,000 elements (the mean: sum, then times 1/N, as
algorithms/cells.RankMean), and of a cell with two AllReduces in sequence (a SAC step: the
critics, then the actor and the temperature). Rank 0 prints a markdown table in milliseconds per
graph call (the graph call's own fixed cost, ~0.3-0.5 ms, included).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def worker(sizes, calls):
    import mindspore as ms
    from mindspore import Tensor, nn, ops
    from mindspore.communication import get_group_size, get_rank, init

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    init()
    world = get_group_size()

    class One(nn.Cell):
        def __init__(self):
            super().__init__()
            self.ar = ops.AllReduce()

        def construct(self, x):
            return self.ar(x) * (1.0 / world)

    class Two(nn.Cell):
        def __init__(self):
            super().__init__()
            self.ar = ops.AllReduce()

        def construct(self, x):
            y = self.ar(x) * (1.0 / world)
            return self.ar(y) * (1.0 / world)

    rows = []
    for name, cell in (("one AllReduce", One()), ("two AllReduces in sequence", Two())):
        for n in sizes:
            x = Tensor(np.ones(n, np.float32))
            cell(x).asnumpy()  # compile
            t0 = time.perf_counter()
            for _ in range(calls):
                cell(x).asnumpy()
            rows.append((name, n, (time.perf_counter() - t0) / calls * 1e3))
    if get_rank() == 0:
        print(f"| graph | floats | ms per call ({world} workers) |\n| --- | --- | --- |")
        for name, n, ms_ in rows:
            print(f"| {name} | {n} | {ms_:.2f} |", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 100000])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--master-port", type=int, default=8190)
    args = p.parse_args()
    if os.environ.get("ALLREDUCE_COST_WORKER"):  # msrun's worker (its argv is msrun's to parse)
        worker(args.sizes, args.calls)
        return
    logs = tempfile.mkdtemp(prefix="msrl-allreduce-")
    cmd = ["msrun", f"--worker_num={args.workers}", f"--local_worker_num={args.workers}", "--master_addr=127.0.0.1",
           f"--master_port={args.master_port}", f"--log_dir={logs}", "--join=True", os.path.abspath(__file__),
           f"--calls={args.calls}", "--sizes", *map(str, args.sizes)]
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, GLOG_v="3", ALLREDUCE_COST_WORKER="1", PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(logs, "worker_0.log")) as fh:
        print("".join(line for line in fh if line.startswith("|")), end="")


if __name__ == "__main__":
    main()
