"""``python policy.py check``: integrity, the golden set against the training cell, latency, a report."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Dict, List, Optional, Tuple

import numpy as np

from .backends import BACKENDS, default_atol
from .compare import compare_actions
from .errors import EXIT_ERROR, EXIT_MISMATCH, EXIT_PASS, ExportError, _one_line
from .policy import Policy, load
from .reader import Export, open_export
from .sampling import kl_report
from .sequences import sequence_check


def _failed(policy: Policy, what: str, exc: Exception) -> ExportError:
    """The one-line error of a backend that raised on ``what``, naming its model file."""
    runner = getattr(policy, "runner", None)
    name = "the model" if runner is None else runner.info.get("file", "the model")
    return ExportError(f"{name}: backend {policy.backend} failed on {what} ({_one_line(exc)})")


def golden_check(policy: Policy, export: Export, atol: float) -> Tuple[dict, Dict[str, np.ndarray]]:
    """The golden set at the exported batch shape against the training cell's recorded actions
    (a recurrent export: its golden sequences through the deployed loop, step by step): the
    figures, and the backend's outputs (``actions``; a recurrent export's states per step too),
    so a caller that looks further at them does not run the backend again."""
    if export.state_size:
        try:
            res, run = sequence_check(policy, export, atol)
        except ExportError:
            raise
        except Exception as exc:
            raise _failed(policy, "the golden sequences", exc) from None
        res["batch"] = export.golden_batch
        return res, run
    obs, ref = export.golden()
    try:
        pred = np.asarray(policy.act_at_batch(obs, export.golden_batch))
    except (ValueError, TypeError, IndexError) as exc:  # outputs that do not even concatenate
        pred = None
        res = {"passed": False, "shape_mismatch": True, "first_mismatch": 0,
               "output_mismatch": f"artifact outputs are not a batch of actions ({_one_line(exc)})"}
    except Exception as exc:
        raise _failed(policy, "the golden set", exc) from None
    if pred is not None:
        res = compare_actions(pred, ref, export.spec.discrete, atol)
        if not res.get("shape_mismatch") and pred.dtype.kind != ref.dtype.kind:
            res["passed"] = False
        if res.get("shape_mismatch") or pred.dtype.kind != ref.dtype.kind:
            res["output_mismatch"] = (f"artifact returns {pred.dtype} {list(pred.shape)}, the training cell "
                                      f"{ref.dtype} {list(ref.shape)}")
    res["batch"] = export.golden_batch
    if export.distribution is not None and pred is not None:
        res["distribution"] = distribution_check(policy, export, obs)
    return res, ({} if pred is None else {"actions": pred})


def distribution_check(policy: Policy, export: Export, obs: np.ndarray) -> dict:
    """The backend's action distribution at the golden observations against the training cell's
    recorded one: per-row KL(training cell || backend), its max and mean, the rows above the tolerance."""
    try:
        got = policy.distribution_at_batch(obs, export.golden_batch)
    except ExportError:
        raise
    except Exception as exc:
        raise _failed(policy, "the golden set's distribution", exc) from None
    assert export.distribution is not None
    return kl_report(export.distribution, export.golden_distribution(), got)


def distribution_summary(d: dict) -> str:
    """One line of a distribution check's figures."""
    return (f"{d['kind']} distribution: KL(training cell || backend) max {d['kl_max']:.3g}, mean {d['kl_mean']:.3g}, "
            f"{d['rows_above']} rows above {d['tolerance']:g}")


def distribution_criterion(golden: dict) -> Optional[dict]:
    """The pass criterion of a distribution export's KL check (None: the export has none)."""
    d = golden.get("distribution")
    if d is None:
        return None
    return {"name": f"golden set action distributions: KL(training cell || backend) <= {d['tolerance']:g} on every "
                    f"row", "passed": bool(d["passed"]), "value": d["kl_max"]}


def latency(policy: Policy, obs: np.ndarray, batch: int, seconds: float = 1.0, min_calls: int = 30) -> dict:
    rows = np.resize(obs, (batch, obs.shape[1])).astype(obs.dtype)
    # ``obs`` are model-input rows (golden set); with frame stacking they hold k frames, which act()
    # (it takes one frame and stacks it) does not take: time validation + model on the rows instead
    call = policy.act if policy.frame_stack == 1 else (lambda r: policy.run_batched(policy.validate(r)))
    policy.reset()  # a recurrent policy then carries the state of these ``batch`` envs
    times: List[float] = []
    t_end = time.perf_counter() + seconds
    while len(times) < min_calls or (time.perf_counter() < t_end and len(times) < 10_000):
        t0 = time.perf_counter()
        call(rows)
        times.append(time.perf_counter() - t0)
    us = np.asarray(times) * 1e6
    return {"batch": batch, "calls": len(times), "p50_us": float(np.percentile(us, 50)),
            "p99_us": float(np.percentile(us, 99))}


def check(directory: str, backend: Optional[str] = None, atol: Optional[float] = None, target: str = "cpu",
          device_id: int = 0, precision_mode: Optional[str] = None, latency_seconds: float = 0.5,
          write_report: bool = True) -> dict:
    """What ``python policy.py check`` does: integrity, golden set, latency, report-check-BACKEND.json."""
    export = open_export(directory)
    policy = load(directory, backend, target=target, device_id=device_id, precision_mode=precision_mode,
                  check_hashes=False)
    b = policy.backend
    atol = default_atol(b, export.precision) if atol is None else float(atol)
    golden, _ = golden_check(policy, export, atol)
    if export.state_size and export.precision != "fp16":
        what = "identical" if export.spec.discrete else ("bit-identical" if atol == 0 else f"within atol {atol:g}")
        criterion = {"name": f"golden sequences step by step: actions {what}, states "
                             f"{'bit-identical' if atol == 0 else f'within atol {atol:g} x max(1, |state|)'}",
                     "passed": bool(golden["passed"]), "value": golden.get("first_divergence")}
    elif export.precision == "fp16":
        criterion = {"name": "golden set drift (fp16 export: reported, judged by msrl verify's rollouts)",
                     "passed": True, "value": golden.get("max_abs_error", golden.get("agreement"))}
    elif export.spec.discrete:
        criterion = {"name": "golden set discrete actions identical", "passed": bool(golden["passed"]),
                     "value": golden.get("agreement")}
    else:
        criterion = {"name": "golden set bit-identical" if atol == 0 else f"golden set within atol {atol:g}",
                     "passed": bool(golden["passed"]), "value": golden.get("max_abs_error")}
    if golden.get("output_mismatch"):
        criterion["passed"] = False
    criteria = [criterion] + [c for c in [distribution_criterion(golden)] if c is not None]
    report = {"export_dir": os.path.abspath(directory), "backend": b, "runner": policy.runner.info,
              "precision": export.precision, "atol": atol, "algorithm": export.algorithm, "env_id": export.env_id,
              "integrity": {"checked": sorted(export.files), "passed": True}, "golden": golden,
              "criteria": criteria, "passed": all(c["passed"] for c in criteria),
              "python": sys.version.split()[0], "numpy": np.__version__,
              "host_preprocessing": list(export.manifest.get("host_preprocessing") or [])}
    if report["passed"] and latency_seconds > 0:
        obs, _ = export.golden()
        big = policy.fixed_batch or export.golden_batch if (policy.fixed_batch or export.golden_batch) > 1 else 32
        report["latency"] = [latency(policy, obs, 1, latency_seconds)]
        if big != 1:
            report["latency"].append(latency(policy, obs, big, latency_seconds))
    if write_report:
        try:
            name = f"report-check-{b}.json"  # one per backend, beside msrl verify's report-verify-BACKEND.*
            tmp = os.path.join(directory, f".{name}.tmp-{os.getpid()}")
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(report, fh, indent=2)
                fh.write("\n")
            os.replace(tmp, os.path.join(directory, name))
            report["report"] = os.path.join(directory, name)
        except OSError as exc:
            report["report"] = f"not written ({_one_line(exc)})"
    return report


def main(argv: Optional[List[str]] = None, prog: str = "policy.py", default_dir: Optional[str] = None) -> int:
    """``policy.py check``; ``default_dir``: the export directory (the bundle entry passes its own)."""
    here = default_dir or os.getcwd()
    p = argparse.ArgumentParser(prog=prog, description="Run or check this exported policy bundle.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    c = sub.add_parser("check", help="integrity, golden set against the training cell, latency; writes report-check-BACKEND.json")
    c.add_argument("--dir", default=here, help="export directory (default: the bundle's own)")
    c.add_argument("--backend", help=f"one of {', '.join(BACKENDS)} (or lite); default: the first installed")
    c.add_argument("--atol", type=float, help="tolerance for continuous actions (default 0 on mindspore, else 1e-5)")
    c.add_argument("--target", default="cpu", choices=["cpu", "ascend"], help="mindspore_lite: the device")
    c.add_argument("--precision-mode", help="mindspore_lite: explicit precision mode (default enforce_fp32)")
    c.add_argument("--device-id", type=int, default=0)
    c.add_argument("--latency-seconds", type=float, default=0.5)
    c.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = p.parse_args(argv)
    try:
        r = check(args.dir, args.backend, args.atol, args.target, args.device_id, args.precision_mode,
                  args.latency_seconds)
    except ExportError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(r))
        return EXIT_PASS if r["passed"] else EXIT_MISMATCH
    g = r["golden"]
    detail = (f"agreement {g['agreement']:.4f}" if "agreement" in g else
              f"max abs error {g['max_abs_error']:.3g}" if "max_abs_error" in g else g.get("output_mismatch", ""))
    print(f"{prog} check [{r['backend']}]: {r['algorithm']} on {r['env_id']}, sha256 of "
          f"{len(r['integrity']['checked'])} files ok; golden set {g.get('count', '?')} obs at batch {g['batch']}: {detail}")
    for lat in r.get("latency", []):
        print(f"  latency at batch {lat['batch']}: p50 {lat['p50_us']:.0f} us, p99 {lat['p99_us']:.0f} us "
              f"({lat['calls']} calls)")
    if "sequences" in g:
        print(f"  golden sequences: {g['sequences']['lanes']} lanes x {g['sequences']['steps']} steps, max error h "
              f"{g.get('max_h_error', float('nan')):.3g} c {g.get('max_c_error', float('nan')):.3g} (scaled "
              f"{g.get('max_state_error_scaled', float('nan')):.3g}), first divergence {g.get('first_divergence')}")
    if "distribution" in g:
        print(f"  {distribution_summary(g['distribution'])}")
    for fault in g.get("faults", []):
        print(f"  fault: {fault}")
    for w in r.get("host_preprocessing", []):  # env.wrappers training ran outside the graph (manifest)
        print(f"  host preprocessing the control loop must apply around act(): {w.get('entry')} {w.get('kwargs')} "
              f"({w.get('kind')})")
    for crit in r["criteria"]:
        print(f"  [{'ok' if crit['passed'] else 'FAIL'}] {crit['name']}")
    print(f"  {'PASS' if r['passed'] else 'FAIL'}; report: {r.get('report')}")
    return EXIT_PASS if r["passed"] else EXIT_MISMATCH


if __name__ == "__main__":
    sys.exit(main())
