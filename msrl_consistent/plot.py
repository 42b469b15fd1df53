"""`msrl plot`: learning curves of run directories, one line per run, seeds of one config as a band.

Runs whose ``config.yaml`` agree on everything but the seed (same algorithm, environment and
hyper-parameters) form a group. A group of several seeds is drawn as its mean with a +- one
standard deviation band, each run interpolated onto a common x grid over the range every seed
covers (nothing is extrapolated); a group of one run is its own line.

Read from ``metrics.jsonl``: ``--metric train`` (the default) plots the ``recent_mean_return``
of the ``kind: train`` rows (mean return of the last ``log.window`` training episodes, one point
per rollout or log interval, so the curve starts at the first update and shows learning);
``--metric eval`` plots the ``mean_return`` of the ``kind: eval`` rows (periodic evaluation with
the deterministic policy every ``eval.freq`` steps, and the final one: few points, none at step 0).
``--metric mismatch`` plots ``mismatch_max`` of the ``kind: train`` rows (the rollout/update
mismatch, docs/mismatch.md).
``--x steps`` uses each row's ``step``; ``--x time`` its
``time`` (seconds since the logger started; a resumed run continues from its last time).

matplotlib is an optional package (the ``plot`` extra).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

from .config import ConfigError
from .optional import PLOT_INSTALL, require

METRICS = {"eval": ("eval", "mean_return", "evaluation mean return (deterministic policy)"),
           "train": ("train", "recent_mean_return", "training mean return (recent episodes)"),
           "mismatch": ("train", "mismatch_max", "rollout/update mismatch (max |delta|)")}
XAXES = {"steps": ("step", "environment steps"), "time": ("time", "wall time (s)")}
GRID_POINTS = 200


@dataclass
class Curve:
    run_dir: str
    algorithm: str
    env_id: str
    seed: Any
    config: Dict[str, Any]
    x: np.ndarray
    y: np.ndarray


@dataclass
class Group:
    label: str
    curves: List[Curve] = field(default_factory=list)


def _flatten(d: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def read_curve(run_dir: str, metric: str = "eval", x: str = "steps") -> Curve:
    """One run's curve; ConfigError when ``run_dir`` is not a run directory or has no such rows."""
    kind, key = METRICS[metric][:2]
    xkey = XAXES[x][0]
    from .directories import CONFIG, RUN, expect
    expect(run_dir, RUN)
    cfg_path = os.path.join(run_dir, CONFIG)
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(metrics_path):
        raise ConfigError(f"{run_dir} is not a run directory (no metrics.jsonl)")
    with open(cfg_path, encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh) or {}
    xs, ys = [], []
    offset, last_time = 0.0, 0.0
    with open(metrics_path, encoding="utf-8") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill: skip it
            if row.get("kind") == "event" and row.get("event") == "resumed":
                offset = last_time  # the resumed logger's clock starts again at 0
            if "time" in row:
                last_time = offset + float(row["time"])
            if row.get("kind") != kind or row.get(key) is None:
                continue
            xs.append(float(row["step"]) if xkey == "step" else last_time)
            ys.append(float(row[key]))
    if not xs:
        raise ConfigError(f"{metrics_path} has no '{kind}' rows with {key} (try --metric "
                          f"{'train' if metric == 'eval' else 'eval'})")
    order = np.argsort(xs, kind="stable")
    return Curve(run_dir=run_dir, algorithm=str(cfg.get("algorithm", "?")),
                 env_id=str((cfg.get("env") or {}).get("id", "?")), seed=cfg.get("seed"),
                 config={k: v for k, v in _flatten(cfg).items() if k != "seed"},
                 x=np.asarray(xs)[order], y=np.asarray(ys)[order])


def group_curves(curves: Sequence[Curve]) -> List[Group]:
    """Curves grouped by their config without the seed, in the order first seen. A label is
    "algorithm env", plus the keys that tell apart groups of the same algorithm and env."""
    groups: Dict[str, List[Curve]] = {}
    for c in curves:
        groups.setdefault(json.dumps(c.config, sort_keys=True, default=str), []).append(c)
    out = []
    for members in groups.values():
        first = members[0]
        base = f"{first.algorithm} {first.env_id}"
        rivals = [g[0] for g in groups.values() if g[0] is not first
                  and (g[0].algorithm, g[0].env_id) == (first.algorithm, first.env_id)]
        diff = sorted({k for r in rivals for k in set(first.config) | set(r.config)
                       if first.config.get(k) != r.config.get(k)})
        if diff:
            shown = ", ".join(f"{k}={first.config.get(k)}" for k in diff[:3])
            base += f" ({shown}{', ...' if len(diff) > 3 else ''})"
        seeds = ", ".join(str(c.seed) for c in members)
        label = f"{base}, {len(members)} seeds: mean ± std" if len(members) > 1 else f"{base}, seed {seeds}"
        out.append(Group(label=label, curves=members))
    return out


def band(curves: Sequence[Curve], points: int = GRID_POINTS) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x grid, mean, std) of ``curves`` interpolated onto a common grid over the x range that
    every curve covers."""
    lo = max(float(c.x[0]) for c in curves)
    hi = min(float(c.x[-1]) for c in curves)
    if hi < lo:
        raise ConfigError("the runs of one group do not overlap on the x axis: "
                          + ", ".join(c.run_dir for c in curves))
    grid = np.linspace(lo, hi, points) if hi > lo else np.asarray([lo])
    ys = np.stack([np.interp(grid, c.x, c.y) for c in curves])
    return grid, ys.mean(0), ys.std(0)


def plot_runs(run_dirs: Sequence[str], out: str, x: str = "steps", metric: str = "train",
              title: Optional[str] = None) -> List[Group]:
    """Write the learning curves of ``run_dirs`` to ``out`` (PNG, or any format matplotlib knows
    from the suffix); returns the groups drawn. A population directory stands for its members
    (the seeds of one config: one band)."""
    if metric not in METRICS:
        raise ConfigError(f"--metric {metric!r}: expected one of {', '.join(METRICS)}")
    if x not in XAXES:
        raise ConfigError(f"--x {x!r}: expected one of {', '.join(XAXES)}")
    if not run_dirs:
        raise ConfigError("msrl plot needs at least one run directory")
    matplotlib = require("matplotlib", "msrl plot", PLOT_INSTALL)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .populations import expand_populations
    groups = group_curves([read_curve(d, metric, x) for d in expand_populations(run_dirs)])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, g in enumerate(groups):
        color = colors[i % len(colors)]
        if len(g.curves) == 1:
            c = g.curves[0]
            ax.plot(c.x, c.y, color=color, lw=1.6, marker="o" if len(c.x) < 3 else None, label=g.label)
            continue
        for c in g.curves:  # the individual seeds, faint
            ax.plot(c.x, c.y, color=color, lw=0.6, alpha=0.3)
        grid, mean, std = band(g.curves)
        ax.plot(grid, mean, color=color, lw=1.8, marker="o" if len(grid) == 1 else None, label=g.label)
        ax.fill_between(grid, mean - std, mean + std, color=color, alpha=0.2, lw=0)
    ax.set_xlabel(XAXES[x][1])
    ax.set_ylabel(METRICS[metric][2])
    ax.set_title(title or ", ".join(sorted({f"{c.algorithm} {c.env_id}" for g in groups for c in g.curves})))
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return groups
