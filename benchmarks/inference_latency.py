"""Per-call inference latency of one policy on every runtime, side by side in one process.

    python benchmarks/inference_latency.py                      # trains tiny PPO runs first
    python benchmarks/inference_latency.py --run runs/cartpole  # or uses a given run

For batch 1 and 256: the training cell (PolicyCell in GRAPH_MODE), MindIR via
`mindspore.load` + `nn.GraphCell`, ONNX Runtime (1 thread), MindSpore Lite 2.0.0's CPU target
(1 thread, `--format lite`'s model; needs `msrl lite install`) through msrl's shim: in a process
without MindSpore, as on a board (the runner's call only), with Lite's threads unpinned and pinned
to one core, and through msrl's lite backend from this process, which holds MindSpore and so runs
Lite in a child process (pinned; the pipe's cost included); and as references PyTorch eager
(1 thread, needs the `bench` extra) and plain NumPy computing the same function with the same
weights (MLP actors of PPO). Lite's own Python module
cannot be measured here (PyPI's wheel imports on CPython 3.7 only). Prints p50/p99 in
microseconds and the max abs difference of each runtime's actions against the training cell. The
numbers in docs/benchmarks.md come from this script.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("GLOG_v", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def timeit(fn, x, calls):
    for _ in range(20):
        fn(x)
    t = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter()
        fn(x)
        t[i] = time.perf_counter() - t0
    return float(np.percentile(t, 50) * 1e6), float(np.percentile(t, 99) * 1e6)


def actor_weights(policy):
    """(normalizer or None, [(W, b), ...], head kind, low, high) read from the training cell."""
    from msrl_consistent.networks.agents import named_parameters
    params = {k: p.asnumpy() for k, p in named_parameters(policy.agent).items()}
    layers = []
    i = 0
    while f"actor.layers.{i}.weight" in params:
        layers.append((params[f"actor.layers.{i}.weight"], params[f"actor.layers.{i}.bias"]))
        i += 2
    if not layers:
        raise SystemExit("this benchmark reads non-shared MLP actors (actor.layers.N); got " + ", ".join(params))
    norm = None
    if policy.cfg.env.normalize_obs:
        norm = (params["normalizer.mean"], params["normalizer.var"], policy.agent.normalizer.clip)
    spec = policy.spec
    head = "argmax" if spec.discrete else ("tanh" if policy.agent.squash else "clip")
    return norm, layers, head, spec.act_low, spec.act_high, policy.cfg.policy.activation


def numpy_policy(w):
    norm, layers, head, low, high, act = w
    f = {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0)}[act]

    def run(x):
        if norm is not None:
            x = np.clip((x - norm[0]) / np.sqrt(norm[1] + 1e-8), -norm[2], norm[2])
        for j, (W, b) in enumerate(layers):
            x = x @ W.T + b
            if j < len(layers) - 1:
                x = f(x)
        if head == "argmax":
            return x.argmax(-1).astype(np.int32)
        if head == "tanh":
            return np.clip(low + (np.tanh(x) + 1) * (high - low) / 2, low, high)
        return np.clip(x, low, high)
    return run


def torch_policy(w):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    norm, layers, head, low, high, act = w
    mods = []
    for j, (W, b) in enumerate(layers):
        lin = torch.nn.Linear(W.shape[1], W.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(W))
            lin.bias.copy_(torch.from_numpy(b))
        mods.append(lin)
        if j < len(layers) - 1:
            mods.append(torch.nn.Tanh() if act == "tanh" else torch.nn.ReLU())
    net = torch.nn.Sequential(*mods).eval()
    lo, hi = torch.from_numpy(low) if low is not None else None, torch.from_numpy(high) if high is not None else None
    nm = None if norm is None else (torch.from_numpy(norm[0]), torch.from_numpy(norm[1]), norm[2])

    @torch.no_grad()
    def run(x):
        t = torch.from_numpy(x)
        if nm is not None:
            t = torch.clamp((t - nm[0]) / torch.sqrt(nm[1] + 1e-8), -nm[2], nm[2])
        out = net(t)
        if head == "argmax":
            return out.argmax(-1).to(torch.int32).numpy()
        if head == "tanh":
            return torch.clamp(lo + (torch.tanh(out) + 1) * (hi - lo) / 2, lo, hi).numpy()
        return torch.clamp(out, lo, hi).numpy()
    return run


LITE_IN_PROCESS = r"""
import json, sys, time
import numpy as np
from msrl_consistent.deploy import lite
path, xfile, calls, outfile, pin = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "pin"
x = np.load(xfile)
run, info = lite.open_session(lite.binding("shim"), path, pin=pin)
for _ in range(20):
    run([x])
t = np.empty(calls)
for i in range(calls):
    t0 = time.perf_counter()
    run([x])
    t[i] = time.perf_counter() - t0
np.save(outfile, run([x])[0])
print(json.dumps([float(np.percentile(t, 50) * 1e6), float(np.percentile(t, 99) * 1e6)]))
"""


def lite_in_process(model, x, calls, tmp, pin):
    """Lite's runner in a process without MindSpore (a board's situation): (p50, p99, actions)."""
    xfile, outfile = os.path.join(tmp, "lite-x.npy"), os.path.join(tmp, "lite-y.npy")
    np.save(xfile, x)
    r = subprocess.run([sys.executable, "-c", LITE_IN_PROCESS, model, xfile, str(calls), outfile,
                        "pin" if pin else "no-pin"], capture_output=True,
                       text=True, env=dict(os.environ, GLOG_v="3"))
    if r.returncode != 0:
        raise SystemExit(f"Lite in its own process failed: {r.stderr[-2000:]}")
    p50, p99 = json.loads(r.stdout.strip().splitlines()[-1])
    return p50, p99, np.load(outfile)


def quick_run(config, steps, out):
    from msrl_consistent.cli import main
    if not os.path.isfile(os.path.join(out, "summary.json")):
        assert main(["train", config, "--total-timesteps", str(steps), "--run-dir", out, "--quiet",
                     "--set", "eval.freq=0", "--set", "eval.episodes=1"]) == 0
    return out


def bench(run_dir, tmp, batches, calls):
    from msrl_consistent.export.exporter import export_run
    from msrl_consistent.runtime import load_policy

    train = load_policy(run_dir, backend="train")
    try:
        w = actor_weights(train)
    except SystemExit:  # SAC's actor: no NumPy / PyTorch reference
        w = None
    exp_dyn = os.path.join(tmp, os.path.basename(run_dir) + "-dyn")
    if not os.path.isdir(exp_dyn):
        export_run(run_dir, exp_dyn, formats=["mindir", "onnx", "lite"], golden=64)
    lite_pol = load_policy(exp_dyn, backend="lite")
    ms_pol = load_policy(exp_dyn, backend="mindspore")
    rows = []
    rng = np.random.default_rng(0)
    for b in batches:
        exp_b = exp_dyn
        if b != 1:
            exp_b = os.path.join(tmp, os.path.basename(run_dir) + f"-b{b}")
            if not os.path.isdir(exp_b):
                export_run(run_dir, exp_b, formats=["mindir", "onnx"], batch=b, golden=b)
        ort_pol = load_policy(exp_b, backend="onnxruntime")
        x = rng.uniform(-1, 1, (b, train.obs_dim)).astype(np.float32)
        ref = train._run(x)
        runtimes = [("training cell (GRAPH_MODE)", train._run), ("MindIR + GraphCell", ms_pol._run),
                    ("ONNX Runtime", ort_pol._run), ("MindSpore Lite, shim, in process", False),
                    ("MindSpore Lite, shim, in process, pinned", True),
                    ("MindSpore Lite, shim, child process (pinned; from msrl)", lite_pol._run)]
        if w is not None:
            runtimes.append(("NumPy", numpy_policy(w)))
            tp = torch_policy(w)
            if tp is not None:
                runtimes.insert(3, ("PyTorch eager", tp))
        n = calls if b == 1 else max(calls // 4, 100)
        for name, fn in runtimes:
            if isinstance(fn, bool):
                p50, p99, got = lite_in_process(os.path.join(exp_dyn, "actor_lite.mindir"), x, n, tmp, fn)
            else:
                p50, p99 = timeit(fn, x, n)
                got = fn(x)
            diff = float(np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64)).max())
            rows.append({"policy": os.path.basename(run_dir), "batch": b, "runtime": name,
                         "p50_us": round(p50, 1), "p99_us": round(p99, 1), "max_abs_diff_vs_training_cell": diff})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--run", action="append", help="run directory (repeatable); default: tiny PPO runs")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--workdir", default=None)
    args = p.parse_args()
    tmp = args.workdir or tempfile.mkdtemp(prefix="msrl-latency-")
    root = os.path.dirname(HERE)
    runs = args.run or [
        quick_run(os.path.join(root, "configs/ppo/CartPole-v1.yaml"), 2048, os.path.join(tmp, "ppo-cartpole")),
        quick_run(os.path.join(root, "configs/ppo/Pendulum-v1.yaml"), 4096, os.path.join(tmp, "ppo-pendulum")),
        quick_run(os.path.join(root, "configs/sac/Pendulum-v1.yaml"), 600, os.path.join(tmp, "sac-pendulum")),
    ]
    rows = []
    for r in runs:
        rows += bench(r, tmp, [1, 256], args.calls)
    print("\n| policy | batch | runtime | p50 (us) | p99 (us) | max abs diff vs training cell |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['policy']} | {r['batch']} | {r['runtime']} | {r['p50_us']} | {r['p99_us']} | "
              f"{r['max_abs_diff_vs_training_cell']:.2e} |")


if __name__ == "__main__":
    main()
