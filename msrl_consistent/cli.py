"""`msrl train|eval|export|verify`.

Config and usage errors print ``msrl: error: ...`` and exit 2 without a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import List, Optional

from .checkpoint import CheckpointError
from .config import ConfigError

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad command-line input (exit 2)."""


def _quiet_mindspore_logs() -> None:
    # MindSpore prints C++ warnings to stderr by default; keep the CLI's output readable.
    os.environ.setdefault("GLOG_v", "3")


def _algorithms():
    import msrl_consistent.algorithms as algorithms  # registers the algorithm configs
    return algorithms


def default_run_dir(cfg) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{cfg.algorithm}-{cfg.env.id}-seed{cfg.seed}-{stamp}")


def cmd_train(args) -> int:
    from .checkpoint import atomic_write_text
    from .config import dump_config, load_config

    algorithms = _algorithms()
    overrides = list(args.set or [])
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    if args.total_timesteps is not None:
        overrides.append(f"total_timesteps={args.total_timesteps}")
    if args.device is not None:
        overrides.append(f"device={args.device}")
    cfg = load_config(args.config, overrides)
    run_dir = args.run_dir or default_run_dir(cfg)
    if os.path.isdir(run_dir) and os.listdir(run_dir):
        raise UsageError(f"run directory {run_dir} already exists and is not empty; choose another --run-dir")
    os.makedirs(run_dir, exist_ok=True)
    atomic_write_text(os.path.join(run_dir, "config.yaml"), dump_config(cfg))
    algo = algorithms.get_algorithm(cfg.algorithm)(cfg)
    progress = not args.quiet
    if not args.quiet:
        print(f"msrl: training {cfg.algorithm} on {cfg.env.id} (seed {cfg.seed}, {cfg.total_timesteps} steps) -> {run_dir}")
    summary = algo.learn(run_dir, progress=progress)
    if not args.quiet:
        ev = summary["final_eval"]
        print(f"msrl: done in {summary['wall_time_s']:.1f}s ({summary['steps_per_second']:.0f} steps/s); "
              f"eval mean return {ev['mean_return']:.2f} +- {ev['std_return']:.2f}; run dir {run_dir}")
    return 0


def cmd_eval(args) -> int:
    import numpy as np

    from .runtime import load_policy, is_export_dir, read_run_config
    from .envs import run_episodes

    path = args.path
    if is_export_dir(path):
        backend = args.backend or "mindspore"
        policy = load_policy(path, backend=backend, device=args.device_id)
        env_cfg = policy.env_config()
    else:
        if args.backend not in (None, "train"):
            raise UsageError(f"{path} is a run directory: only --backend train applies (got {args.backend!r})")
        backend = "train"
        policy = load_policy(path, backend="train", checkpoint=args.checkpoint)
        env_cfg = policy.env_config()
    seed = args.seed if args.seed is not None else 0
    res = run_episodes(env_cfg, policy.act, args.episodes, seed)
    lat = np.asarray(res["latencies"]) * 1e6
    out = {
        "path": path, "backend": backend, "env": env_cfg.id, "episodes": args.episodes, "seed": seed,
        "mean_return": float(np.mean(res["returns"])), "std_return": float(np.std(res["returns"])),
        "returns": [float(r) for r in res["returns"]], "lengths": res["lengths"],
        "latency_us": {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)), "calls": int(lat.size)},
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{env_cfg.id} [{backend}] {args.episodes} episodes (seed {seed}): mean return "
              f"{out['mean_return']:.2f} +- {out['std_return']:.2f}; per-call latency p50 "
              f"{out['latency_us']['p50']:.0f} us, p99 {out['latency_us']['p99']:.0f} us")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="msrl", description="MindSpore RL with train-inference consistency")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    t = sub.add_parser("train", help="train an agent from a YAML config")
    t.add_argument("config", help="YAML config file (see configs/)")
    t.add_argument("--seed", type=int, help="override the config's seed")
    t.add_argument("--total-timesteps", type=str, help="override total_timesteps (1e5 accepted)")
    t.add_argument("--run-dir", help="run directory (default runs/<algo>-<env>-seed<seed>-<timestamp>)")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (dotted), repeatable")
    t.add_argument("--device", choices=["CPU", "GPU", "Ascend"], help="MindSpore device target")
    t.add_argument("--quiet", action="store_true", help="no progress bar or messages")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("eval", help="roll out a run's deterministic policy or an exported artifact")
    e.add_argument("path", help="run directory or export directory")
    e.add_argument("--episodes", type=int, default=10)
    e.add_argument("--seed", type=int, help="episode i is seeded with seed + i (default 0)")
    e.add_argument("--checkpoint", help="checkpoint file (run directories; default: the final/latest one)")
    e.add_argument("--backend", choices=["train", "mindspore", "onnxruntime", "lite"],
                   help="export directories: the runtime to use (default mindspore)")
    e.add_argument("--device-id", type=int, default=0, help="lite backend on Ascend: device id")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.set_defaults(func=cmd_eval)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    _quiet_mindspore_logs()
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "episodes", 1) is not None and getattr(args, "episodes", 1) < 1:
        parser.error("--episodes must be >= 1")
    try:
        return int(args.func(args) or 0)
    except (ConfigError, UsageError, CheckpointError) as exc:
        print(f"msrl: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("msrl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
