"""`msrl verify`: prove, with numbers, that an exported artifact acts like the training cell.

1. Integrity: every file's sha256 against the manifest (exit 2 on a mismatch).
2. Golden set: the backend's actions for the recorded observations, at the exported batch
   shape, against the training cell's recorded actions: max abs / rel error, discrete
   agreement, first mismatch.
3. Rollouts (when the source run is present): N seeded episodes driven by the exported
   policy, with the training cell's action computed on the same observation at every step,
   and N episodes driven by the training cell: whether the trajectories are identical (or
   the first step where they diverge) and the return delta.

Pass criteria (defaults): backend mindspore with an fp32 export: bit-identical (atol 0) and
identical trajectories; other backends: max abs error <= 1e-5 and identical discrete
actions; fp16 exports: drift reported, fail when the mean return drops by more than 5%.
Exit 0 pass, 1 mismatch, 2 integrity or usage error.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from msrl_consistent.checkpoint import atomic_write_text
from msrl_consistent.config import ConfigError
from msrl_consistent.deploy import compare_actions, default_atol, golden_check
from msrl_consistent.deploy.backends import REFERENCE
from msrl_consistent.deploy.backends import get as get_backend
from msrl_consistent.deploy.check import distribution_criterion, distribution_summary
from msrl_consistent.directories import EXPORT, expect
from msrl_consistent.episodes import run_episodes
from msrl_consistent.export.exact import describe, float64_action_reference, float64_reference
from msrl_consistent.runtime import TrainCellPolicy, load_policy, provide_env

FP16_MAX_RETURN_DROP = 0.05


def _first_divergence(a: dict, b: dict) -> Optional[int]:
    n = min(len(a["obs"]), len(b["obs"]))
    for t in range(n):
        if not (np.array_equal(a["obs"][t], b["obs"][t]) and np.array_equal(a["act"][t], b["act"][t])):
            return t
    return None if len(a["obs"]) == len(b["obs"]) else n


def rollouts(exported, reference, env_cfg, episodes: int, seed: int, discrete: bool, atol: float) -> dict:
    """``episodes`` seeded episodes driven by the exported policy (the training cell's action
    computed at every visited state) and the same episodes driven by the training cell."""
    per = []
    same_obs_err = []
    disagree = 0
    steps = 0
    for i in range(episodes):
        ex = run_episodes(env_cfg, exported.act, 1, seed + i, reference=reference.act)["episodes"][0]
        rf = run_episodes(env_cfg, reference.act, 1, seed + i, trajectories=True)["episodes"][0]
        div = _first_divergence(ex, rf)
        if discrete:
            wrong = int((ex["act"].astype(np.int64) != ex["ref"].astype(np.int64)).sum())
            disagree += wrong
            within = wrong == 0
        else:
            err = float(np.abs(ex["act"].astype(np.float64) - ex["ref"]).max()) if len(ex["act"]) else 0.0
            same_obs_err.append(err)
            within = err <= atol
        steps += len(ex["act"])
        per.append({"seed": seed + i, "return_exported": ex["return"], "return_training": rf["return"],
                    "length_exported": len(ex["act"]), "length_training": len(rf["act"]),
                    "identical": div is None, "first_divergence_step": div, "within_atol": bool(within)})
    r_ex = np.array([p["return_exported"] for p in per])
    r_tr = np.array([p["return_training"] for p in per])
    out = {"episodes": episodes, "seed": seed, "steps": steps,
           "identical_episodes": int(sum(p["identical"] for p in per)),
           "within_atol_episodes": int(sum(p["within_atol"] for p in per)),
           "mean_return_exported": float(r_ex.mean()), "mean_return_training": float(r_tr.mean()),
           "return_delta": float(r_ex.mean() - r_tr.mean()), "per_episode": per}
    if discrete:
        out["same_state_action_disagreements"] = disagree
    else:
        out["same_state_max_abs_error"] = float(max(same_obs_err)) if same_obs_err else 0.0
    return out


def verify_export(export_dir: str, backend: str = REFERENCE, episodes: int = 20, seed: int = 0,
                  atol: Optional[float] = None, write_report: bool = True, env=None, **backend_kwargs) -> dict:
    """Run every check; returns the report (``report["passed"]``). Raises IntegrityError /
    ConfigError for exit-2 conditions. ``env``: the Python object the run was trained on with
    ``train(env=...)`` when it is not importable by name (runtime.provide_env)."""
    expect(export_dir, EXPORT)
    if env is not None:
        provide_env(export_dir, env)
    if backend == "train":
        raise ConfigError("verify compares an export's backend with the training cell; choose a backend of the export")
    # validates the directory once (deploy.open_export): names, hashes, golden set; then loads the backend
    policy = load_policy(export_dir, backend=backend, **backend_kwargs)
    manifest = policy.manifest
    backend = policy.backend  # the one name (lite -> mindspore_lite)
    precision = manifest.export.precision
    atol = default_atol(backend) if atol is None else float(atol)
    discrete = policy.spec.discrete
    export = policy.export
    hashes = export.files
    g_obs, g_act = export.golden()
    golden, outputs = golden_check(policy, export, atol)
    if policy.fixed_batch is None and not golden.get("output_mismatch") and not export.state_size:
        # Batch sensitivity: the whole set in one call against the recorded batch-1 actions.
        whole = policy.run_batched(policy.validate(g_obs))
        sens = compare_actions(whole, g_act, discrete, 0.0)
        golden["batch_sensitivity"] = {"batch": int(len(g_obs)),
                                       **{k: sens[k] for k in ("max_abs_error", "agreement", "bit_identical") if k in sens}}

    if not get_backend(backend).same_engine and precision == "fp32" and not golden.get("output_mismatch"):
        # Is an error float32 rounding? Both float32 runs against the graph in float64.
        if export.state_size and "sequences" in golden:
            golden["float64_reference"] = float64_reference(export_dir, export.golden_sequences(),
                                                            (outputs["h"], outputs["c"]), export.state_size)
        elif not export.state_size and not discrete:
            golden["float64_reference"] = float64_action_reference(export_dir, g_obs, g_act, outputs["actions"])

    report = {"export_dir": os.path.abspath(export_dir), "backend": backend, "precision": precision,
              "atol": atol, "integrity": {"checked": sorted(hashes), "passed": True}, "golden": golden}
    src_run = manifest.source.run_dir
    if golden.get("output_mismatch"):
        # The artifact does not even return environment actions (e.g. logits instead of an
        # index): nothing to roll out.
        report["rollouts"] = None
        report["rollouts_skipped"] = "the artifact's output is not an environment action: " + golden["output_mismatch"]
    elif episodes > 0 and os.path.isdir(src_run):
        reference = TrainCellPolicy(src_run, manifest.source.checkpoint)
        report["rollouts"] = rollouts(policy, reference, policy.env_config(), episodes, seed, discrete, atol)
    else:
        report["rollouts"] = None
        report["rollouts_skipped"] = ("episodes=0" if episodes <= 0 else f"source run {src_run} is not present")

    report["criteria"], report["passed"] = _judge(report, backend, precision, discrete)
    if write_report:
        json_path, md_path = report_paths(export_dir, backend)
        report["report"] = md_path
        atomic_write_text(json_path, json.dumps(report, indent=2) + "\n")
        atomic_write_text(md_path, render_markdown(report))
    return report


def report_paths(export_dir: str, backend: str):
    """(json, markdown) report paths of ``msrl verify`` on ``backend``: one pair per backend, so the
    reports of several backends (and ``policy.py check``'s ``report-check-BACKEND.json``) stand
    side by side instead of overwriting each other."""
    base = os.path.join(export_dir, f"report-verify-{backend}")
    return base + ".json", base + ".md"


def rollout_summary(report: dict) -> str:
    """One line saying what a verify report's rollouts showed, the count that the criterion judges
    first: '20/20 identical step for step' for a bit-identical backend (MindSpore, fp32, atol 0),
    else '20/20 with the same actions at every visited state' (discrete) or '20/20 within atol
    1e-05' (continuous), followed by how many were also bit-identical."""
    roll, atol = report["rollouts"], report["atol"]
    discrete = "agreement" in report["golden"]
    n, same = roll["episodes"], roll["identical_episodes"]
    if get_backend(report["backend"]).same_engine and atol == 0 and report["precision"] == "fp32":
        return f"{same}/{n} identical step for step"
    within = roll.get("within_atol_episodes", same)
    what = "with the same actions at every visited state" if discrete else f"within atol {atol:g}"
    return f"{within}/{n} {what}, {same}/{n} bit-identical step for step"


def _judge(report: dict, backend: str, precision: str, discrete: bool):
    golden, roll = report["golden"], report["rollouts"]
    crit = []
    if precision == "fp16":
        crit.append({"name": "golden set drift (reported, not a criterion for fp16)", "passed": True,
                     "value": golden.get("max_abs_error", golden.get("agreement"))})
        if roll is not None:
            ref = roll["mean_return_training"]
            drop = (ref - roll["mean_return_exported"]) / max(abs(ref), 1e-8)
            crit.append({"name": f"mean return drop <= {FP16_MAX_RETURN_DROP:.0%}", "value": drop,
                         "passed": bool(drop <= FP16_MAX_RETURN_DROP)})
    else:
        strict = get_backend(backend).same_engine
        name = "golden set bit-identical" if strict and report["atol"] == 0 else f"golden set within atol {report['atol']:g}"
        if discrete:
            name = "golden set discrete actions identical"
        if "sequences" in golden:  # a recurrent export: actions and states at every step of the deployed loop
            tol = "bit-identical" if report["atol"] == 0 else f"within atol {report['atol']:g} x max(1, |state|)"
            name = (f"golden sequences step by step: {'discrete actions identical' if discrete else 'actions'} and "
                    f"states {tol}")
        crit.append({"name": name, "passed": bool(golden["passed"]), "first_mismatch": golden.get("first_mismatch")})
        for fault in golden.get("faults", []):
            crit.append({"name": f"fault: {fault}", "passed": False})
        dist = distribution_criterion(golden)
        if dist is not None:
            crit.append(dist)
        if roll is not None:
            if strict and report["atol"] == 0:
                crit.append({"name": "rollouts identical step for step", "passed": roll["identical_episodes"] == roll["episodes"],
                             "value": f"{roll['identical_episodes']}/{roll['episodes']}"})
            elif discrete:
                crit.append({"name": "rollouts: same action as the training cell at every visited state",
                             "passed": roll["same_state_action_disagreements"] == 0,
                             "value": roll["same_state_action_disagreements"]})
            else:
                crit.append({"name": f"rollouts: action error at visited states <= atol {report['atol']:g}",
                             "passed": roll["same_state_max_abs_error"] <= report["atol"],
                             "value": roll["same_state_max_abs_error"]})
    return crit, all(c["passed"] for c in crit)


def render_markdown(r: dict) -> str:
    g = r["golden"]
    lines = [f"# msrl verify: {'PASS' if r['passed'] else 'FAIL'}", "",
             f"- export: `{r['export_dir']}`", f"- backend: {r['backend']}, precision: {r['precision']}, atol: {r['atol']:g}",
             f"- integrity: sha256 of {', '.join(r['integrity']['checked'])} match the manifest", "",
             "## Golden set", "", "| metric | value |", "| --- | --- |",
             f"| observations | {g.get('count')} (batch {g.get('batch')}) |"]
    if "sequences" in g:
        lines.append(f"| sequences | {g['sequences']['lanes']} lanes x {g['sequences']['steps']} steps, the state "
                     f"carried by the deployed loop |")
    for k in ("output_mismatch", "agreement", "max_abs_error", "mean_abs_error", "max_rel_error", "bit_identical",
              "max_h_error", "max_c_error", "max_state_error_scaled", "first_mismatch", "first_divergence"):
        if k in g:
            lines.append(f"| {k} | {g[k]} |")
    if "distribution" in g:
        lines.append(f"| action distribution | {distribution_summary(g['distribution']).replace('||', 'to')} |")
    if "float64_reference" in g:
        lines.append(f"| float64 reference | {describe(g['float64_reference'])} |")
    if "batch_sensitivity" in g:
        bs = g["batch_sensitivity"]
        lines.append(f"| batch sensitivity (all {bs['batch']} in one call vs batch {g.get('batch')}) | "
                     + ", ".join(f"{k} {v}" for k, v in bs.items() if k != "batch") + " |")
    roll = r.get("rollouts")
    lines += ["", "## Rollouts", ""]
    if roll is None:
        lines.append(f"skipped: {r.get('rollouts_skipped')}")
    else:
        lines += [f"{roll['episodes']} episodes from seed {roll['seed']}: {rollout_summary(r)}; "
                  f"mean return exported {roll['mean_return_exported']:.3f}, training cell "
                  f"{roll['mean_return_training']:.3f} (delta {roll['return_delta']:+.3f}).", "",
                  "| seed | return exported | return training | identical | first divergence |",
                  "| --- | --- | --- | --- | --- |"]
        for p in roll["per_episode"]:
            lines.append(f"| {p['seed']} | {p['return_exported']:.3f} | {p['return_training']:.3f} | "
                         f"{p['identical']} | {p['first_divergence_step']} |")
    lines += ["", "## Criteria", "", "| criterion | passed | value |", "| --- | --- | --- |"]
    for c in r["criteria"]:
        lines.append(f"| {c['name']} | {c['passed']} | {c.get('value', c.get('first_mismatch', ''))} |")
    return "\n".join(lines) + "\n"
