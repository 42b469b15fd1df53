"""`msrl train|eval|export|verify|replay|plot|configs|lite`.

Config and usage errors print ``msrl: error: ...`` and exit 2 without a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

from . import __version__
from .checkpoint import CheckpointError
from .cli_train import cmd_train
from .config import ConfigError
from .deploy.backends import CHOICES, HOST, REFERENCE, by_preference, get
from .deploy.formats import NAMES as FORMAT_NAMES
from .optional import MissingOptionalPackage

EXIT_USAGE = 2
_WRITE_ERRNOS = {1, 13, 28, 30, 122}  # EPERM, EACCES, ENOSPC, EROFS, EDQUOT


class UsageError(Exception):
    """Bad command-line input (exit 2)."""


def _quiet_mindspore_logs() -> None:
    # MindSpore prints C++ warnings to stderr by default; keep the CLI's output readable.
    os.environ.setdefault("GLOG_v", "3")


BACKEND_CHOICES = list(CHOICES)  # the backend registry's names and their aliases (lite, ort)


def cmd_eval(args) -> int:
    import numpy as np

    from .directories import EXPORT, RUN, expect
    from .episodes import run_episodes
    from .runtime import load_policy

    path = args.path
    if expect(path, RUN, EXPORT) == EXPORT:
        backend = args.backend or REFERENCE
    else:
        if args.backend not in (None, "train"):
            raise UsageError(f"{path} is a run directory: only --backend train applies (got {args.backend!r})")
        backend = "train"
    if args.record_limit < 1:
        raise UsageError(f"--record-limit {args.record_limit}: expected a positive number of observations")
    if args.guard and backend == "train":
        raise UsageError("--guard applies to export directories (a deployed artifact), not to the training cell")
    fallback = None if args.fallback == "none" else args.fallback
    policy = load_policy(path, backend=backend, device=args.device_id, checkpoint=args.checkpoint,
                         record=args.record, record_limit=args.record_limit, guard=args.guard,
                         fallback=fallback, latency_budget_ms=args.latency_budget_ms,
                         switch_after=args.switch_after)
    env_cfg = policy.env_config()
    seed = args.seed if args.seed is not None else 0
    rec = policy.recorder
    on_step = None
    if rec is not None:
        totals = {}

        def on_step(ep, t, obs, action, reward, done):
            rec.step_result(reward, done)
            totals[ep] = totals.get(ep, 0.0) + reward
            if done:
                rec.episode(seed + ep, totals[ep], t + 1)
    try:
        res = run_episodes(env_cfg, policy.act, args.episodes, seed, on_step=on_step)
    finally:
        if rec is not None:
            rec.close()  # flushed on normal exit, on an exception and on SIGINT/SIGTERM
    lat = np.asarray(res["latencies"]) * 1e6
    out = {
        "path": path, "backend": backend, "env": env_cfg.id, "episodes": args.episodes, "seed": seed,
        "mean_return": float(np.mean(res["returns"])), "std_return": float(np.std(res["returns"])),
        "returns": [float(r) for r in res["returns"]], "lengths": res["lengths"],
        "latency_us": {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)), "calls": int(lat.size)},
    }
    if policy.guard is not None:
        out["guard"] = policy.guard_stats()
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{env_cfg.id} [{backend}] {args.episodes} episodes (seed {seed}): mean return "
              f"{out['mean_return']:.2f} +- {out['std_return']:.2f}; per-call latency p50 "
              f"{out['latency_us']['p50']:.0f} us, p99 {out['latency_us']['p99']:.0f} us")
        if "guard" in out:
            g = out["guard"]
            bad = ", ".join(f"{k} {v}" for k, v in g["violations"].items() if v) or "none"
            print(f"  guard: {g['calls']} calls, violations: {bad}; {g['fallbacks']} answered by the fallback "
                  f"({g['fallback_backend'] or 'none'})")
    return 0


def cmd_export(args) -> int:
    from msrl_consistent.export.exporter import export_run, parse_batch, parse_formats, parse_outputs

    m = export_run(args.run_dir, args.out, checkpoint=args.checkpoint, formats=parse_formats(args.format),
                   outputs=parse_outputs(args.outputs),
                   precision=args.precision, batch=parse_batch(args.batch), golden=args.golden,
                   soc_version=args.soc_version, precision_mode=args.precision_mode, force=args.force,
                   precision_sweep=args.precision_sweep, sweep_episodes=args.sweep_episodes,
                   lite_target=args.lite_target, lite_precision_mode=args.lite_precision_mode,
                   preflight_only=args.preflight_only, allow_host_wrappers=args.allow_host_wrappers)
    if args.json:
        print(json.dumps(m.to_json()))
    else:
        files = ", ".join(f"{k} ({v[:12]})" for k, v in m.files.items())
        print(f"msrl: exported {m.algorithm} on {m.env_id} ({m.export.precision}, batch "
              f"{m.export.batch}) -> {args.out}: {files}, manifest.json")
        report = m.export.conversion.get("atc_preflight")
        if report:
            from msrl_consistent.export.preflight import summary
            print(f"msrl: ATC pre-flight passed (CANN {report['cann_version']} ONNX operator list, precision mode "
                  f"{report['precision_mode']}){': ' + summary(report) if summary(report) else ''}")
    return 0


def cmd_verify(args) -> int:
    from msrl_consistent.export.verify import rollout_summary, verify_export

    options = {"target": args.lite_target, "device": args.device_id, "precision_mode": args.lite_precision_mode}
    kwargs = {k: v for k, v in options.items() if k in get(args.backend).options}
    report = verify_export(args.export_dir, backend=args.backend, episodes=args.episodes, seed=args.seed,
                           atol=args.atol, **kwargs)
    if args.json:
        print(json.dumps(report))
    else:
        g = report["golden"]
        err = f"agreement {g['agreement']:.4f}" if "agreement" in g else f"max abs error {g.get('max_abs_error', float('nan')):.3g}"
        print(f"msrl verify [{args.backend}]: golden set {g.get('count')} obs, {err}, bit-identical {g.get('bit_identical')}")
        if "sequences" in g:
            print(f"  golden sequences: {g['sequences']['lanes']} lanes x {g['sequences']['steps']} steps through the "
                  f"deployed loop, max error h {g.get('max_h_error', float('nan')):.3g} c {g.get('max_c_error', float('nan')):.3g} "
                  f"(scaled {g.get('max_state_error_scaled', float('nan')):.3g}), first divergence "
                  f"{g.get('first_divergence')}")
        if "distribution" in g:
            from msrl_consistent.deploy.check import distribution_summary
            print(f"  {distribution_summary(g['distribution'])}")
        if "float64_reference" in g:
            from msrl_consistent.export.exact import describe
            print(f"  {describe(g['float64_reference'])}")
        roll = report["rollouts"]
        if roll:
            print(f"  rollouts: {rollout_summary(report)}, return exported "
                  f"{roll['mean_return_exported']:.2f} vs training {roll['mean_return_training']:.2f}")
        for c in report["criteria"]:
            print(f"  [{'ok' if c['passed'] else 'FAIL'}] {c['name']}")
        print(f"  {'PASS' if report['passed'] else 'FAIL'}; report: {report['report']}")
    return 0 if report["passed"] else 1


def cmd_replay(args) -> int:
    from msrl_consistent.export.replay import replay

    r = replay(args.export_dir, args.trace, against=args.against, atol=args.atol)
    if args.json:
        print(json.dumps(r))
    else:
        detail = (f"agreement {r['agreement']:.6f}" if "agreement" in r
                  else f"max abs error {r.get('error', {}).get('max', 0.0):.3g}")
        print(f"msrl replay [{r['recorded_backend']} vs {r['against']}]: {r['steps']} steps, {detail}; first "
              f"difference at step {r['first_difference_step']}, first beyond atol {r['atol']:g} at step "
              f"{r['first_divergence_step']}")
        if "state" in r:
            st = r["state"]
            print(f"  state: max error h {st['max_h_error']:.3g} c {st['max_c_error']:.3g} (scaled "
                  f"{st['max_state_error_scaled']:.3g}), first beyond atol at step {st['first_divergence_step']}")
        if "return_impact" in r:
            ri = r["return_impact"]
            print(f"  return: recorded {ri['recorded_mean_return']:.2f}, reference {ri['reference_mean_return']:.2f} "
                  f"(delta {ri['delta']:+.2f}) over {ri['episodes']} episodes")
        print(f"  {'PASS' if r['passed'] else 'DRIFT'}; report: {os.path.join(args.export_dir, 'replay-' + args.against + '.md')}")
    return 0 if r["passed"] else 1


def cmd_configs(args) -> int:
    import yaml

    from .config import dump_config, load_config, shipped_configs

    if args.defaults:  # what `msrl train ALGO --env ID` trains with: every key, the algorithm's SB3 defaults
        print(dump_config(load_config(f"--defaults {args.defaults}", data={"algorithm": args.defaults})), end="")
        return 0

    rows = []
    for name, path in shipped_configs().items():
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        rows.append({"name": name, "algorithm": data.get("algorithm", "?"), "env": (data.get("env") or {}).get("id", "?"),
                     "total_timesteps": data.get("total_timesteps", "?"), "path": path})
    if args.json:
        print(json.dumps(rows))
        return 0
    head = ("name", "algorithm", "env", "total_timesteps")
    widths = [max(len(h), *(len(str(r[h])) for r in rows)) for h in head]
    for r in [dict(zip(head, head))] + rows:
        print("  ".join(str(r[h]).ljust(w) for h, w in zip(head, widths)).rstrip())
    print("train one with: msrl train NAME (for example msrl train ppo/CartPole-v1)")
    return 0


def cmd_plot(args) -> int:
    from .plot import METRICS, XAXES, plot_runs

    groups = plot_runs(args.run_dirs, args.out, x=args.x, metric=args.metric, title=args.title)
    runs = sum(len(g.curves) for g in groups)
    first = min(float(c.x[0]) for g in groups for c in g.curves)
    print(f"msrl: plotted {runs} run(s) in {len(groups)} group(s): {METRICS[args.metric][2]} against "
          f"{XAXES[args.x][1]} from {first:g} -> {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="msrl", description="MindSpore RL with train-inference consistency")
    p.add_argument("--version", action="version", version=f"msrl-consistent {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    t = sub.add_parser("train", help="train an agent from a YAML config")
    t.add_argument("config", nargs="?", help="YAML config file, or the name of a shipped config such as "
                                              "ppo/CartPole-v1 (list them with `msrl configs`)")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its newest intact checkpoint")
    t.add_argument("--init-from", metavar="RUN_DIR", help="a new run starting from RUN_DIR's parameters (e.g. an "
                   "`msrl import`ed model; optimizer, counters and RNG fresh); the config must build the same network")
    t.add_argument("--workers", type=int, default=1,
                   help="data-parallel workers launched through msrun (PPO, SAC, TD3); with --resume, the count "
                        "the run was checkpointed with resumes it exactly")
    t.add_argument("--master-port", type=int, default=8118, help="msrun master port (with --workers)")
    t.add_argument("--nodes", type=int, metavar="M", help="with --workers N: the N workers run on M hosts, N/M each; "
                   "run the same command on every host with its own --node-rank")
    t.add_argument("--node-rank", type=int, metavar="R", help="with --nodes: this host's place, 0 to M-1 (node 0 "
                   "writes the run directory's files)")
    t.add_argument("--master-addr", metavar="HOST", help="with --nodes: node 0's address, the same on every host")
    t.add_argument("--seed", type=int, help="override the config's seed")
    t.add_argument("--seeds", metavar="SEEDS",
                   help="train one member per seed (0-4, or 0,3,7) in one process (see --jobs), a population (PPO); RUN_DIR "
                        "then holds one run directory per member (docs/populations.md)")
    t.add_argument("--sweep", action="append", metavar="KEY=V1,V2",
                   help="with --seeds: one member per value (a grid when repeated) of an algo key; "
                        "learning_rate, clip_range, ent_coef, vf_coef, gamma, gae_lambda and max_grad_norm (SAC/TD3: "
                        "learning_rate, gamma, tau) keep the members stacked, any other key trains them one after "
                        "another")
    t.add_argument("--jobs", type=int, default=1,
                   help="with --seeds: train the members in this many processes, each a group of them with one "
                        "kernel thread on its own core (2 uses both cores of a 2-core machine)")
    t.add_argument("--total-timesteps", type=str, help="override total_timesteps (1e5 accepted)")
    t.add_argument("--run-dir", help="run directory (default runs/<algo>-<env>-seed<seed>-<timestamp>)")
    t.add_argument("--env", metavar="ID", help="the environment (env.id): a registered id, module:EnvId or module.path:callable; "
                   "with an algorithm name as CONFIG (msrl train sac --env Pendulum-v1) its defaults train on it")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (dotted), repeatable")
    t.add_argument("--device", choices=["CPU", "GPU", "Ascend"], help="MindSpore device target")
    t.add_argument("--quiet", action="store_true", help="no progress bar or messages")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("eval", help="roll out a run's deterministic policy or an exported artifact")
    e.add_argument("path", help="run directory or export directory")
    e.add_argument("--episodes", type=int, default=10)
    e.add_argument("--seed", type=int, help="episode i is seeded with seed + i (default 0)")
    e.add_argument("--checkpoint", help="checkpoint file (run directories; default: the final/latest one)")
    e.add_argument("--backend", choices=["train", *BACKEND_CHOICES],
                   help=f"export directories: the runtime to use (default {REFERENCE})")
    e.add_argument("--guard", action="store_true",
                   help="export directories: check every action (finite, inside the action space) and time it; "
                        "a violation or a backend error is answered by the fallback backend and counted")
    e.add_argument("--fallback", default="auto", choices=["auto", "none", *BACKEND_CHOICES],
                   help="with --guard: the fallback backend (auto: the best other backend that the export holds "
                        f"and this machine has installed: {', '.join(b.name for b in by_preference())})")
    e.add_argument("--latency-budget-ms", type=float, help="with --guard: count calls slower than this")
    e.add_argument("--switch-after", type=int, default=3,
                   help="with --guard and a budget: after this many consecutive late calls, the fallback serves "
                        "every later call (0: only count; default 3)")
    e.add_argument("--device-id", type=int, default=0, help="lite backend on Ascend: device id")
    e.add_argument("--record", metavar="PATH", help="write every observation and action to the trace PATH (.npz)")
    e.add_argument("--record-limit", type=int, default=100_000, help="at most this many observations in the trace")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.set_defaults(func=cmd_eval)

    x = sub.add_parser("export", help="export a run's deterministic policy cell (MindIR, ONNX, Lite, OM)")
    x.add_argument("run_dir")
    x.add_argument("--out", required=True, help="export directory to create")
    x.add_argument("--checkpoint", help="checkpoint file (default: the run's final/latest one)")
    x.add_argument("--format", default="mindir", help=f"comma-separated, of {', '.join(FORMAT_NAMES)} (default mindir); "
                                                      "lite and om convert actor.onnx (added when missing); actor.mindir "
                                                      "is always written (verify's MindSpore reference)")
    x.add_argument("--precision", default="fp32", choices=["fp32", "fp16"],
                   help="fp16: the same cell computing in float16 with float32 input/output")
    x.add_argument("--batch", default="dynamic", help="fixed batch size N or 'dynamic' (default)")
    x.add_argument("--golden", type=int, default=1024, help="observations in the golden set (default 1024)")
    x.add_argument("--outputs", default="action",
                   help="'action' (default) or 'action,distribution': the action distribution's parameters as "
                        "further outputs (sampling on the board, KL checks in verify)")
    x.add_argument("--soc-version", help="OM: the Ascend SoC, e.g. Ascend310P3")
    x.add_argument("--precision-mode", help="OM: ATC precision mode (default must_keep_origin_dtype)")
    x.add_argument("--preflight-only", action="store_true",
                   help="OM: check actor.onnx against CANN's ONNX operator list instead of running ATC (no CANN needed)")
    x.add_argument("--lite-target", default="cpu", choices=["cpu", "ascend"],
                   help="lite: the device the converted model is for (ascend writes [ascend_context])")
    x.add_argument("--lite-precision-mode", help="lite: explicit precision mode (default enforce_fp32)")
    x.add_argument("--force", action="store_true", help="replace an existing export directory")
    x.add_argument("--allow-host-wrappers", action="store_true",
                   help="export although env.wrappers change observations or actions outside the policy cell (the "
                        "manifest lists them as host preprocessing the board must repeat)")
    x.add_argument("--precision-sweep", action="store_true",
                   help="also measure fp32 / fp16-matmul / fp16 emulations of the ATC and Lite precision modes "
                        "(golden-set error, return delta) into precision_sweep.md")
    x.add_argument("--sweep-episodes", type=int, default=10, help="seeded episodes per precision in the sweep")
    x.add_argument("--json", action="store_true", help="print the manifest as JSON")
    x.set_defaults(func=cmd_export)

    v = sub.add_parser("verify", help="check an export against the training cell")
    v.add_argument("export_dir")
    v.add_argument("--backend", default=REFERENCE, choices=BACKEND_CHOICES)
    v.add_argument("--episodes", type=int, default=20, help="seeded rollouts side by side (0: none)")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--atol", type=float, help="tolerance (default: 0 for mindspore, 1e-5 otherwise)")
    v.add_argument("--lite-target", default="cpu", choices=["cpu", "ascend"])
    v.add_argument("--lite-precision-mode", help="lite: explicit precision mode (default enforce_fp32)")
    v.add_argument("--device-id", type=int, default=0)
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_verify)

    rp = sub.add_parser("replay", help="recompute a recorded trace with a reference and find where it drifts")
    rp.add_argument("export_dir")
    rp.add_argument("trace", help="trace written by `msrl eval --record` or load_policy(..., record=PATH)")
    rp.add_argument("--against", default="train", choices=["train", *HOST])  # export.replay.AGAINST
    rp.add_argument("--atol", type=float, help="tolerance (default 0 for mindspore-vs-training-cell fp32, else 1e-5)")
    rp.add_argument("--json", action="store_true")
    rp.set_defaults(func=cmd_replay)

    pl = sub.add_parser("plot", help="learning curves of runs; seeds of one config as a mean +- std band")
    pl.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    pl.add_argument("--out", default="learning-curves.png", help="image file to write (default learning-curves.png)")
    pl.add_argument("--x", default="steps", choices=["steps", "time"], help="x axis: environment steps or wall time")
    pl.add_argument("--metric", default="train", choices=["train", "eval", "mismatch"],
                    help="train (default): mean return of the recent training episodes, from the first rollout on; "
                         "eval: the periodic evaluation's mean return (deterministic policy, every eval.freq steps); "
                         "mismatch: the rollout/update mismatch at every update (docs/mismatch.md)")
    pl.add_argument("--title", help="plot title (default: the algorithms and environments)")
    pl.set_defaults(func=cmd_plot)

    from .envs.check import add_parser as add_check_env_parser
    from .lite_install import add_parser as add_lite_parser
    add_lite_parser(sub)
    add_check_env_parser(sub)
    from .sb3 import add_parser as add_import_parser
    add_import_parser(sub)

    c = sub.add_parser("configs", help="list the shipped configs (usable by name: msrl train ppo/CartPole-v1)")
    c.add_argument("--json", action="store_true")
    c.add_argument("--defaults", metavar="ALGO", help="print every key of ALGO's defaults as YAML (its network as SB3's)")
    c.set_defaults(func=cmd_configs)
    return p


def _usage_errors():
    """Exceptions reported as `msrl: error: ...` with exit 2 (no traceback)."""
    from msrl_consistent.export.om import AtcUnavailable

    from .deploy import ExportError, GuardError
    from .manifest import IntegrityError
    from .runtime import BackendUnavailable
    return (ConfigError, UsageError, CheckpointError, MissingOptionalPackage, BackendUnavailable, IntegrityError,
            ExportError, GuardError, AtcUnavailable)


def _sigterm(signum, frame):
    raise SystemExit(143)


def main(argv: Optional[List[str]] = None) -> int:
    _quiet_mindspore_logs()
    import signal
    import threading
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _sigterm)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "eval" and args.episodes < 1:
        parser.error("--episodes must be >= 1")
    if args.command == "verify" and args.episodes < 0:
        parser.error("--episodes must be >= 0")
    try:
        return int(args.func(args) or 0)
    except _usage_errors() as exc:
        msg = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"msrl: error: {msg}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        if exc.errno in _WRITE_ERRNOS:
            print(f"msrl: error: cannot write {exc.filename or ''}: {exc.strerror or exc}; nothing already "
                  f"written was changed", file=sys.stderr)
            return EXIT_USAGE
        raise
    except KeyboardInterrupt:
        print("msrl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
