"""Where the peak resident memory of PPO on Atari Breakout goes: one process builds and trains
configs/ppo/Breakout-v5.yaml as ``msrl train`` does (registry.get("ppo")(cfg).learn(run_dir)) and
records VmRSS / VmHWM (and RssAnon / RssFile) from /proc/self/status at each stage; the stages are
hooked by wrapping methods (make_vec_env, FastCall.__call__, PPO.train), not by copying the loop.
A background thread samples VmRSS every 50 ms (the peak between stages; it cannot run while a
MindSpore call holds the GIL, VmHWM is the kernel's exact high-water mark).

    pip install -e ".[atari]" "opencv-python-headless<4.11"
    GLOG_v=3 python benchmarks/breakout_memory.py --total-timesteps 3072 [--json OUT] [--set KEY=VALUE ...]
        [--ms-memory optimize_level=O1 --ms-memory max_size=1GB]   # mindspore.runtime.set_memory's options
        [--profile-update 2]   # MindSpore's profiler over update phase 2: host CPU time per op type

The final evaluation is skipped unless --final-eval (Breakout-v5 without a FIRE reset can wait out
the ALE's 108,000-frame episode limit); the final checkpoint is written as usual.
"""
import argparse
import json
import os
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIG = os.path.join(ROOT, "configs", "ppo", "Breakout-v5.yaml")
MIB = 2.0 ** 20


def proc_status():
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem of this process in MiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(rest.split()[0]) / 1024.0
    return out


class Sampler(threading.Thread):
    """VmRSS every ``period`` s; ``take()`` returns the largest sample since the last take."""

    def __init__(self, period=0.05):
        super().__init__(daemon=True)
        self.period, self.lock, self.peak, self.stop = period, threading.Lock(), 0.0, False

    def run(self):
        while not self.stop:
            r = proc_status()["VmRSS"]
            with self.lock:
                self.peak = max(self.peak, r)
            time.sleep(self.period)

    def take(self):
        r = proc_status()["VmRSS"]
        with self.lock:
            p, self.peak = max(self.peak, r), r
        return p


SAMPLER = Sampler()
STAGES = []
T0 = time.perf_counter()


def mark(stage, note=""):
    s = proc_status()
    row = {"stage": stage, "rss_mib": s["VmRSS"], "hwm_mib": s["VmHWM"], "anon_mib": s.get("RssAnon"),
           "file_mib": s.get("RssFile"), "sampled_peak_since_prev_mib": SAMPLER.take(),
           "t_s": time.perf_counter() - T0, "note": note}
    STAGES.append(row)
    print(f"[{row['t_s']:7.1f}s] {stage}: RSS {row['rss_mib']:.0f} MiB, HWM {row['hwm_mib']:.0f} MiB", flush=True)


def nbytes_of(obj):
    return int(getattr(obj, "nbytes", 0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total-timesteps", type=int, default=3072)
    ap.add_argument("--json")
    ap.add_argument("--set", action="append", default=[], help="config override KEY=VALUE (as msrl train --set)")
    ap.add_argument("--final-eval", action="store_true", help="run the final evaluation (eval.episodes=1)")
    ap.add_argument("--run-dir")
    ap.add_argument("--compile-first", action="store_true",
                    help="diagnostic: Cell.compile the update-phase graph before its first call (compile vs run)")
    ap.add_argument("--ms-memory", action="append", default=[], metavar="KEY=VALUE",
                    help="diagnostic: mindspore.runtime.set_memory(KEY=VALUE, ...) before anything is built")
    ap.add_argument("--profile-update", type=int, metavar="K",
                    help="diagnostic: MindSpore's profiler over update phase K (its kernels' time per op type, "
                         "per minibatch; the phase runs slower under it)")
    a = ap.parse_args()

    SAMPLER.start()
    mark("python start (argparse, threading)")
    import numpy as np  # noqa: F401
    mark("import numpy")
    import mindspore as ms
    mark("import mindspore", f"MindSpore {ms.__version__}")
    set_memory(ms, a.ms_memory)
    import msrl_consistent
    import msrl_consistent.algorithms.ppo as ppo_mod
    import msrl_consistent.pipeline as pipeline
    import msrl_consistent.run_context as run_mod
    from msrl_consistent import fastcall, registry
    from msrl_consistent.training import resolve
    mark("import msrl_consistent + algorithms")
    import ale_py  # noqa: F401
    import cv2  # noqa: F401
    import gymnasium  # noqa: F401
    mark("import gymnasium + ale_py + cv2")

    cfg = resolve(CONFIG, None, a.total_timesteps, ["eval.freq=0", "eval.episodes=1"] + list(a.set))
    info = {"config": CONFIG, "total_timesteps": a.total_timesteps, "overrides": a.set,
            "n_envs": cfg.env.n_envs, "n_steps": cfg.algo.n_steps, "batch_size": cfg.algo.batch_size,
            "n_epochs": cfg.algo.n_epochs}

    # -- hooks ------------------------------------------------------------------------------
    orig_make = pipeline.make_vec_env  # the training envs (pipeline.EnvGroups)

    def make_vec_env(*args, **kw):
        venv = orig_make(*args, **kw)
        mark(f"vector env created ({venv.num_envs} ALE envs)", type(venv).__name__)
        return venv
    pipeline.make_vec_env = make_vec_env

    orig_seed = pipeline.seed_vec_env

    def seed_vec_env(venv, seed):
        obs = orig_seed(venv, seed)
        mark("vector env reset", f"first obs {obs.shape} {obs.dtype}")
        return obs
    pipeline.seed_vec_env = seed_vec_env

    calls = {}
    orig_call = fastcall.FastCall.__call__

    def fast_call(self, *args):
        cell = self.cell
        kind = type(cell).__name__
        n = calls.get(id(self), 0)
        calls[id(self)] = n + 1
        if kind == "PPOUpdatePhase":
            k = info.setdefault("phase_calls", 0) + 1
            info["phase_calls"] = k
            in_bytes = sum(nbytes_of(x) for x in args)
            info.setdefault("phase_input_bytes", in_bytes)
            mark(f"update {k}: inputs as Tensors, before the phase graph call",
                 f"{len(args)} input Tensors, {in_bytes / MIB:.1f} MiB")
        if kind == "PPOUpdatePhase" and n == 0 and a.compile_first:
            cell.compile(*args)
            mark("update 1: phase graph compiled (Cell.compile), not run")
        out = orig_call(self, *args)
        if n == 0 and kind == "PackedRollout":
            mark("first acting graph call (compile + run)", f"input {tuple(args[0].shape)} {args[0].dtype}")
        elif n == 0 and kind == "ValueCell":
            mark("first value graph call (compile + run)", f"input {tuple(args[0].shape)} {args[0].dtype}")
        elif kind == "PPOUpdatePhase":
            k = info["phase_calls"]
            mark(f"update {k}: phase graph returned", "compile + run" if n == 0 else "run (compiled)")
        return out
    fastcall.FastCall.__call__ = fast_call

    orig_train = ppo_mod.PPO.train
    n_train = [0]

    def train(self, buf):
        n_train[0] += 1
        k = n_train[0]
        if k == 1:
            arrays = {name: (tuple(v.shape), str(v.dtype), int(v.nbytes))
                      for name, v in vars(buf).items() if isinstance(v, np.ndarray)}
            info["buffer_arrays"] = arrays
            info["buffer_bytes"] = sum(v[2] for v in arrays.values())
            mark(f"rollout {k} collected (buffer filled, GAE done)",
                 f"buffer arrays {info['buffer_bytes'] / MIB:.1f} MiB")
        else:
            mark(f"rollout {k} collected")
        stats = profiled(self, lambda: orig_train(self, buf), info) if k == a.profile_update else orig_train(self, buf)
        mark(f"update {k} done", f"{self.n_updates} optimizer steps so far")
        return stats
    ppo_mod.PPO.train = train

    info["diagnostics"] = {"compile_first": a.compile_first,
                           "ms_memory": a.ms_memory}

    orig_eval = run_mod.RunContext.evaluate

    def evaluate(self, *args, **kw):
        if not a.final_eval:
            return None
        out = orig_eval(self, *args, **kw)
        mark("final evaluation done")
        return out
    run_mod.RunContext.evaluate = evaluate

    # -- build and train, as msrl train ------------------------------------------------------------
    algo = registry.get(cfg.algorithm)(cfg)
    mark("agent built (networks, Adam, cells; env_spec probe)")
    agent_ids = {id(p) for p in algo.agent.trainable_params()}
    info["param_bytes"] = sum(nbytes_of(p) for p in algo.agent.trainable_params())
    info["param_count"] = sum(int(np.prod(p.shape)) for p in algo.agent.trainable_params())
    info["optimizer_state_bytes"] = sum(nbytes_of(p) for _, p in algo.optimizer.parameters_and_names()
                                        if id(p) not in agent_ids)
    info["conv_impl"] = getattr(algo.agent.actor.first, "conv_impl", None)
    info["preprocessed_dim"] = getattr(algo.agent.actor.first, "preprocessed_dim", None)

    run_dir = a.run_dir or tempfile.mkdtemp(prefix="breakout-memory-")
    summary = algo.learn(run_dir, progress=False)
    mark("learn returned (final checkpoint written)")
    SAMPLER.stop = True
    info["summary"] = {k: summary.get(k) for k in ("num_timesteps", "wall_time_s", "n_updates", "first_update_s",
                                                   "phase_seconds", "params_sha256")}
    info["ru_maxrss_mib"] = __import__("resource").getrusage(__import__("resource").RUSAGE_SELF).ru_maxrss / 1024.0
    info["msrl_version"] = msrl_consistent.__version__
    info["fastcall_active"] = fastcall.ACTIVE
    report(info)
    print_profile(info.get("update_profile"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"stages": STAGES, "info": info}, f, indent=2)


def profiled(algo, run, info):
    """``run()`` (an update phase of ``algo``) under mindspore.Profiler (host CPU op times) -> its
    result; info["update_profile"] gets the wall time, the minibatches and each op type's total
    kernel time in ms."""
    import csv
    import glob

    import mindspore as ms
    out = tempfile.mkdtemp(prefix="breakout-profile-")
    prof = ms.Profiler(start_profile=False, output_path=out)
    prof.start()
    t0, steps = time.perf_counter(), algo.n_updates
    result = run()
    wall = time.perf_counter() - t0
    prof.stop()
    prof.analyse()
    ops = {}
    for path in glob.glob(os.path.join(out, "**", "cpu_op_type_info_*.csv"), recursive=True):
        with open(path) as f:
            for row in csv.DictReader(f):
                ops[row["op_type"]] = ops.get(row["op_type"], 0.0) + float(row["total_compute_time"])
    info["update_profile"] = {"wall_s": wall, "minibatches": algo.n_updates - steps, "op_ms": ops, "output": out}
    return result


def print_profile(p):
    if not p:
        return
    n = max(p["minibatches"], 1)
    total = sum(p["op_ms"].values())
    print(f"\nupdate phase under the profiler: {p['wall_s']:.3f} s for {n} minibatches; kernels {total / n:.1f} ms "
          "per minibatch:")
    for op, ms_ in sorted(p["op_ms"].items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {op:22s} {ms_ / n:7.2f} ms  {100 * ms_ / total:5.1f} %")


def set_memory(ms, options):
    """mindspore.runtime.set_memory with the KEY=VALUE options given (none: MindSpore's defaults)."""
    if options:
        ms.runtime.set_memory(**dict(kv.split("=", 1) for kv in options))
        mark("mindspore.runtime.set_memory", ", ".join(options))


def report(info):
    print()
    print("| stage | RSS MiB | delta MiB | peak so far (VmHWM) MiB | sampled peak since prev MiB | anon / file MiB | note |")
    print("|---|---:|---:|---:|---:|---:|---|")
    prev = None
    for r in STAGES:
        d = "" if prev is None else f"{r['rss_mib'] - prev:+.0f}"
        print(f"| {r['stage']} | {r['rss_mib']:.0f} | {d} | {r['hwm_mib']:.0f} | {r['sampled_peak_since_prev_mib']:.0f} "
              f"| {r['anon_mib']:.0f} / {r['file_mib']:.0f} | {r['note']} |")
        prev = r["rss_mib"]
    print()
    print(f"buffer arrays: {info.get('buffer_bytes', 0) / MIB:.1f} MiB")
    for name, (shape, dtype, nb) in sorted(info.get("buffer_arrays", {}).items(), key=lambda kv: -kv[1][2]):
        print(f"  {name:14s} {str(shape):22s} {dtype:8s} {nb / MIB:8.2f} MiB")
    print(f"parameters: {info['param_count']} = {info['param_bytes'] / MIB:.1f} MiB; Adam state (m, v, scalars): "
          f"{info['optimizer_state_bytes'] / MIB:.1f} MiB")
    print(f"update-phase graph inputs: {info.get('phase_input_bytes', 0) / MIB:.1f} MiB; conv_impl {info['conv_impl']}")
    print(f"ru_maxrss {info['ru_maxrss_mib']:.0f} MiB; summary {info['summary']}")


if __name__ == "__main__":
    main()
