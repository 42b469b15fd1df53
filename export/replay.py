"""`msrl replay`: recompute a recorded trace's actions with a reference and find where they drift.

The reference is the training cell of the export's source run (``train``) or another backend
(``mindspore``, ``onnxruntime``), run at the recorded batch shape (the trace keeps the size of
every call) on the recorded model-input rows (packed Dict rows, Discrete indices, uint8 pixels,
the k stacked frames). The report gives the first step whose action differs (bitwise) and the
first one beyond the tolerance, the error distribution (MultiDiscrete / MultiBinary: a step
differs when any dimension does, and the agreement of each dimension), and, where the trace
recorded episodes (eval with --record), the return impact: the reference rolled out on the same
episode seeds, stacking frames as the recording policy did. A recurrent export's trace is replayed
through the reference's own loop: its state carried from the recorded episode_start flags, its
actions and its state compared with the recorded ones at every step (the state criterion of the
golden sequences, atol x max(1, |state|)).
A trace whose arrays do not fit the export (shapes, dtypes, call sizes, observations outside the
space) is a usage error naming the file, the array and the value.
Exit codes as verify: 0 within tolerance, 1 drift beyond it, 2 integrity or usage error.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from msrl_consistent.checkpoint import atomic_write_text
from msrl_consistent.config import ConfigError
from msrl_consistent.deploy import default_atol, file_sha256
from msrl_consistent.deploy.backends import HOST
from msrl_consistent.deploy.sequences import state_errors
from msrl_consistent.episodes import run_episodes
from msrl_consistent.manifest import IntegrityError, read_manifest
from msrl_consistent.recording import read_trace
from msrl_consistent.runtime import load_policy

AGAINST = ("train",) + HOST
"""What a trace can be recomputed with: the training cell, or a backend that runs on the host."""


def recompute(reference, obs: np.ndarray, call_sizes: np.ndarray, trace_path: str = "trace",
              starts: Optional[np.ndarray] = None):
    """The reference's actions for the recorded calls, at the recorded batch shapes. A recurrent
    reference (``starts``: the recorded episode_start flags) carries its own state from call to
    call, zeros at the first call and wherever the number of envs changes (check_trace: every env
    starts an episode there), so the recording's loop is replayed, not its state: -> (actions, h, c)."""
    outs, hs, cs, start = [], [], [], 0
    h = c = None
    for n in call_sizes:
        n = int(n)
        try:
            x = reference.validate(obs[start:start + n])
        except ValueError as exc:  # a row the export's observation space does not hold
            rows = f"row {start}" if n == 1 else f"rows {start}..{start + n - 1} (one recorded call)"
            raise ConfigError(f"{trace_path}: 'obs' {rows}: {exc}") from None
        if starts is None:
            outs.append(reference.run_batched(x))
        else:
            if h is None or h.shape[0] != n:
                h = c = np.zeros((n, reference.state_size), np.float32)
            a, h, c = reference.run_step_batched(x, h, c, np.ascontiguousarray(starts[start:start + n], np.float32))
            outs.append(a)
            hs.append(h)
            cs.append(c)
        start += n
    actions = np.concatenate(outs) if outs else np.zeros((0,))
    if starts is None:
        return actions
    return actions, np.concatenate(hs), np.concatenate(cs)


def _check_state_arrays(trace: dict, reference, trace_path: str) -> None:
    """A recurrent export's trace holds its steps' episode_start flags and next states; every env
    starts an episode at the first call and wherever the number of envs changes."""
    n, hidden = len(trace["obs"]), reference.state_size
    for key, shape in (("episode_starts", (n,)), ("h", (n, hidden)), ("c", (n, hidden))):
        arr = trace.get(key)
        if arr is None:
            raise ConfigError(f"{trace_path}: no '{key}' array: the export is recurrent ({hidden} state units) and "
                              f"its trace records every step's episode_start flags and state; record it again "
                              f"with this msrl")
        if arr.shape != shape or not np.issubdtype(arr.dtype, np.floating):
            raise ConfigError(f"{trace_path}: '{key}' has {arr.dtype} {arr.shape}, expected float32 {shape}")
    starts, calls, prev, pos = trace["episode_starts"], trace["call_sizes"], None, 0
    if not np.isin(starts, (0.0, 1.0)).all():
        raise ConfigError(f"{trace_path}: 'episode_starts' must hold 0 or 1")
    for size in calls:
        size = int(size)
        if size != prev and not (starts[pos:pos + size] == 1.0).all():
            raise ConfigError(f"{trace_path}: 'episode_starts' of the call at row {pos}: {size} envs after "
                              f"{prev or 'none'}, so every env starts an episode there (flags 1), got "
                              f"{starts[pos:pos + size].tolist()[:8]}")
        prev, pos = size, pos + size


def _action_space_text(reference) -> str:
    spec = reference.spec
    if spec.act_kind == "MultiDiscrete":
        return f"MultiDiscrete({[int(v) for v in spec.nvec]})"
    return f"{spec.act_kind}({spec.n_actions})"


def check_trace(trace: dict, reference, trace_path: str) -> None:
    """The trace's arrays fit the export (shapes, dtypes, call sizes); ConfigError (exit 2) naming
    the file, the array and the value otherwise. Action *values* are not judged here: an action
    outside the space is what a broken backend records, and replay reports it as a difference."""
    obs, act, calls = trace["obs"], trace.get("actions"), trace.get("call_sizes")
    meta = trace["meta"]
    image = reference.spec.obs_kind == "Image"
    want = "uint8 pixel rows" if image else "float32 rows"
    if obs.ndim != 2 or obs.shape[1] != reference.obs_dim:
        raise ConfigError(f"{trace_path}: 'obs' has shape {obs.shape}, but the export's model input is "
                          f"(steps, {reference.obs_dim}) ({want})")
    if not (np.issubdtype(obs.dtype, np.floating) or (image and obs.dtype == np.uint8)):
        raise ConfigError(f"{trace_path}: 'obs' has dtype {obs.dtype}, expected {want}")
    if len(obs) == 0:
        raise ConfigError(f"{trace_path}: no recorded observations ({meta.get('dropped', 0)} dropped past the record "
                          f"limit {meta.get('limit')}); nothing to replay")
    if calls is None or calls.ndim != 1 or not np.issubdtype(calls.dtype, np.integer) or (calls < 1).any() \
            or int(calls.sum()) != len(obs):
        raise ConfigError(f"{trace_path}: 'call_sizes' is {None if calls is None else calls[:8].tolist()}, expected "
                          f"positive call sizes summing to the {len(obs)} recorded observations")
    spec = reference.spec
    shape = (len(obs),) if spec.act_kind == "Discrete" else (len(obs), spec.n_actions)
    if act is None or act.shape != shape:
        raise ConfigError(f"{trace_path}: 'actions' has shape {None if act is None else act.shape}, but the export's "
                          f"{_action_space_text(reference)} action space gives {shape}")
    if spec.discrete != np.issubdtype(act.dtype, np.integer):
        raise ConfigError(f"{trace_path}: 'actions' has dtype {act.dtype}, expected "
                          f"{'integers' if spec.discrete else 'float32'} ({_action_space_text(reference)} actions)")
    if reference.state_size:
        _check_state_arrays(trace, reference, trace_path)


def replay(export_dir: str, trace_path: str, against: str = "train", atol: Optional[float] = None,
           write_report: bool = True) -> dict:
    if against not in AGAINST:
        raise ConfigError(f"--against {against!r}: expected one of {', '.join(AGAINST)}")
    manifest = read_manifest(export_dir)  # validates the directory (deploy.open_export): names, hashes, golden set
    reference = load_policy(export_dir, backend=against)  # a broken model file is refused before the trace is read
    trace = read_trace(trace_path)
    meta = trace["meta"]
    msha = file_sha256(os.path.join(export_dir, "manifest.json"))
    if meta.get("manifest_sha256") != msha:
        raise IntegrityError(f"{trace_path} was recorded from another artifact (manifest sha256 "
                             f"{meta.get('manifest_sha256')!r}, {export_dir}/manifest.json is {msha})")
    check_trace(trace, reference, trace_path)
    obs, rec = trace["obs"], trace["actions"]
    recurrent = bool(reference.state_size)
    if recurrent:
        ref, ref_h, ref_c = recompute(reference, obs, trace["call_sizes"], trace_path, trace["episode_starts"])
    else:
        ref = recompute(reference, obs, trace["call_sizes"], trace_path)
    precision = manifest.export.precision
    atol = default_atol(meta["backend"], precision, against) if atol is None else float(atol)
    discrete = reference.spec.discrete
    report = {"export_dir": os.path.abspath(export_dir), "trace": os.path.abspath(trace_path),
              "recorded_backend": meta["backend"], "against": against, "precision": precision, "atol": atol,
              "steps": int(len(obs)), "dropped": int(meta.get("dropped", 0))}
    if discrete:
        # per step: a MultiDiscrete / MultiBinary action differs when any dimension does
        differs = (rec.astype(np.int64) != ref.astype(np.int64)).reshape(len(obs), -1)
        err = differs.any(axis=1).astype(np.float64)
        report["agreement"] = float(1.0 - err.mean())
        if reference.spec.nvec:  # MultiDiscrete / MultiBinary: where the steps differ, dimension by dimension
            report["agreement_per_dimension"] = [float(1.0 - d.mean()) for d in differs.T]
            first = np.nonzero(err)[0]
            report["first_difference_dimensions"] = np.nonzero(differs[first[0]])[0].tolist() if first.size else []
    else:
        err = np.abs(rec.astype(np.float64) - ref.astype(np.float64)).reshape(len(obs), -1).max(axis=1)
        if len(err):
            report["error"] = {"max": float(err.max()), "mean": float(err.mean()),
                               **{f"p{q}": float(np.percentile(err, q)) for q in (50, 90, 99)}}
    diff = np.nonzero(err > 0)[0]
    beyond = np.nonzero(err > atol)[0]
    report["first_difference_step"] = int(diff[0]) if diff.size else None
    report["first_divergence_step"] = int(beyond[0]) if beyond.size else None
    report["steps_beyond_atol"] = int(beyond.size)
    state_err = None
    if recurrent:  # the recorded state against the reference's own, step by step (deploy.sequences' criterion)
        st = state_errors(trace["h"], trace["c"], ref_h, ref_c)
        state_err = np.asarray(st["state_error_per_step"])
        bad = np.nonzero(state_err > atol)[0]
        report["state"] = {k: v for k, v in st.items() if k != "state_error_per_step"}
        report["state"]["first_divergence_step"] = int(bad[0]) if bad.size else None
        report["state"]["steps_beyond_atol"] = int(bad.size)
        report["state_error_per_step"] = st["state_error_per_step"]
    if meta.get("episodes"):
        seeds = [e["seed"] for e in meta["episodes"]]
        rec_returns = [e["return"] for e in meta["episodes"]]
        ref_returns = [run_episodes(reference.env_config(), reference.act, 1, s)["returns"][0] for s in seeds]
        report["return_impact"] = {
            "episodes": len(seeds), "recorded_mean_return": float(np.mean(rec_returns)),
            "reference_mean_return": float(np.mean(ref_returns)),
            "delta": float(np.mean(rec_returns) - np.mean(ref_returns)),
            "per_episode": [{"seed": s, "recorded": a, "reference": b} for s, a, b in zip(seeds, rec_returns, ref_returns)]}
    elif "rewards" in trace:
        report["recorded_reward_sum"] = float(trace["rewards"].sum())
    report["passed"] = report["first_divergence_step"] is None and (
        not recurrent or report["state"]["first_divergence_step"] is None)
    if write_report:
        base = os.path.join(export_dir, f"replay-{against}")
        report["plot"] = _plot(err, atol, base + ".png", discrete, state_err)
        atomic_write_text(base + ".json", json.dumps(report, indent=2) + "\n")
        atomic_write_text(base + ".md", render_markdown(report))
    return report


def _plot(err: np.ndarray, atol: float, path: str, discrete: bool, state_err=None) -> Optional[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot(np.arange(len(err)), err, lw=0.8, label="action mismatch" if discrete else "action error")
    if state_err is not None:
        ax.plot(np.arange(len(state_err)), state_err, lw=0.8, label="state error / max(1, |state|)")
    if (not discrete or state_err is not None) and atol > 0:
        ax.axhline(atol, color="r", ls="--", lw=0.8, label=f"atol {atol:g}")
        ax.legend()
    ax.set_xlabel("recorded step")
    ax.set_ylabel("action mismatch" if discrete else "max abs action error")
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
    return os.path.basename(path)


def render_markdown(r: dict) -> str:
    lines = [f"# msrl replay: {'PASS' if r['passed'] else 'DRIFT'}", "",
             f"- trace: `{r['trace']}` ({r['steps']} steps recorded with backend {r['recorded_backend']}"
             f"{', ' + str(r['dropped']) + ' dropped past the limit' if r['dropped'] else ''})",
             f"- reference: {r['against']}, export precision {r['precision']}, atol {r['atol']:g}",
             f"- first step whose action differs at all: {r['first_difference_step']}",
             f"- first step beyond atol: {r['first_divergence_step']} ({r['steps_beyond_atol']} steps beyond)"]
    if "agreement" in r:
        lines.append(f"- discrete agreement: {r['agreement']:.6f}")
    if "agreement_per_dimension" in r:
        dims = ", ".join(f"{i}: {a:.6f}" for i, a in enumerate(r["agreement_per_dimension"]))
        lines.append(f"- agreement per action dimension: {dims}; dimensions differing at the first differing step: "
                     f"{r['first_difference_dimensions']}")
    if "state" in r:
        st = r["state"]
        lines.append(f"- state (h, c) against the reference's own, carried from the recorded episode starts: max h error "
                     f"{st['max_h_error']:.3g}, max c error {st['max_c_error']:.3g}, scaled {st['max_state_error_scaled']:.3g}; "
                     f"first step beyond atol x max(1, |state|): {st['first_divergence_step']}")
    if "error" in r:
        e = r["error"]
        lines.append(f"- action error: max {e['max']:.3g}, mean {e['mean']:.3g}, p50 {e['p50']:.3g}, "
                     f"p90 {e['p90']:.3g}, p99 {e['p99']:.3g}")
    if "return_impact" in r:
        ri = r["return_impact"]
        lines += ["", "## Return impact", "",
                  f"{ri['episodes']} recorded episodes: mean return {ri['recorded_mean_return']:.3f}, "
                  f"reference on the same seeds {ri['reference_mean_return']:.3f} (delta {ri['delta']:+.3f})", "",
                  "| seed | recorded | reference |", "| --- | --- | --- |"]
        lines += [f"| {p['seed']} | {p['recorded']:.3f} | {p['reference']:.3f} |" for p in ri["per_episode"]]
    if r.get("plot"):
        lines += ["", f"![per-step error]({r['plot']})"]
    else:
        lines += ["", "(no plot: install matplotlib, `pip install -e .[plot]`)"]
    return "\n".join(lines) + "\n"
