"""Precision sweep: what each ATC / MindSpore Lite precision mode would do to the policy,
emulated on the MindSpore CPU backend, as numbers a user can choose a conversion mode from.

| emulation      | ATC precision_mode                      | Lite ascend precision_mode       |
| -------------- | --------------------------------------- | -------------------------------- |
| fp32           | must_keep_origin_dtype, force_fp32      | enforce_origin, enforce_fp32     |
| fp16-matmul    | allow_fp32_to_fp16                      | preferred_fp32                   |
| fp16           | force_fp16 (ATC's default)              | enforce_fp16                     |
| fp16-kept      | force_fp16 with msrl's --keep_dtype     | enforce_origin on an fp16 export |

fp16-kept is what msrl deploys in float16: the cell in float16 except the parts of
:data:`FP32_KEPT` (the observation normalization and the action head), which float16 cannot
hold (a masked observation's variance of ~1e-9 plus the normalizer's 1e-8 is 0 in float16),
kept in float32 (``msrl export --precision fp16``'s graph; ATC's ``--keep_dtype`` list of an om
export converted with a float16 mode, export/keep_dtype.py).

allow_mix_precision / preferred_optimal choose fp16 op by op from CANN's built-in lists, which
cannot be reproduced here: they are listed as not emulated. The emulations are arithmetic
models (float16 storage and compute of MindSpore's CPU kernels), not Ascend's kernels: the
sweep shows how sensitive the policy is to each precision, and `msrl verify --backend lite`
on the device gives the real figure.
"""
from __future__ import annotations

from typing import List, Optional

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from msrl_consistent.deploy.sequences import run_sequences
from msrl_consistent.episodes import run_episodes
from msrl_consistent.networks.lstm import LSTM
from msrl_consistent.runtime import TrainCellPolicy

MODES = [
    {"emulation": "fp32", "atc": "must_keep_origin_dtype, force_fp32", "lite": "enforce_origin, enforce_fp32"},
    {"emulation": "fp16-matmul", "atc": "allow_fp32_to_fp16", "lite": "preferred_fp32"},
    {"emulation": "fp16", "atc": "force_fp16 (ATC default)", "lite": "enforce_fp16"},
    {"emulation": "fp16-kept", "atc": "force_fp16 with msrl's --keep_dtype", "lite": "enforce_origin on an fp16 export"},
]
FP32_KEPT = ("normalizer", "head")
"""The policy cell's parts a float16 deployment keeps in float32: the observation normalization
and the action head (its post-processing)."""
NOT_EMULATED = [{"atc": "allow_mix_precision", "lite": "preferred_optimal",
                 "why": "op-by-op fp16 selection from CANN's built-in lists; not reproducible on the CPU backend"}]


class CastIO(nn.Cell):
    """float32 in and out around a cell that computes in float16 (fp16 deployment emulation);
    ``half_input`` False: the observation enters as float32 (a kept normalizer takes it)."""

    def __init__(self, cell: nn.Cell, discrete: bool, half_input: bool = True):
        super().__init__()
        self.cell = cell
        self.discrete = discrete
        self.dtype = ms.float16 if half_input else ms.float32

    def construct(self, obs):
        out = self.cell(ops.cast(obs, self.dtype))
        if self.discrete:
            return out
        return ops.cast(out, ms.float32)


class CastState(nn.Cell):
    """A recurrent cell computing in float16 with float32 inputs and outputs: (obs, h, c,
    episode_start) -> (action, h', c'), the state crossing the graph boundary as float32 (what the
    manifest declares), so its rounding to float16 inside each step accumulates over the episode."""

    def __init__(self, cell: nn.Cell, discrete: bool, half_input: bool = True):
        super().__init__()
        self.cell = cell
        self.discrete = discrete
        self.dtype = ms.float16 if half_input else ms.float32

    def construct(self, obs, h, c, episode_start):
        half = ms.float16
        a, h2, c2 = self.cell(ops.cast(obs, self.dtype), ops.cast(h, half), ops.cast(c, half),
                              ops.cast(episode_start, half))
        if not self.discrete:
            a = ops.cast(a, ms.float32)
        return a, ops.cast(h2, ms.float32), ops.cast(c2, ms.float32)


class HalfMatMul(nn.Cell):
    """``x @ w^T`` in float16 between float32 operands: the LSTM's MatMuls under allow_fp32_to_fp16."""

    def __init__(self):
        super().__init__()
        self.matmul = ops.MatMul(transpose_b=True)

    def construct(self, x, w):
        return ops.cast(self.matmul(ops.cast(x, ms.float16), ops.cast(w, ms.float16)), ms.float32)


class Fp16Matmul(nn.Cell):
    """A Dense layer computing in float16 between float32 activations: emulates Ascend's
    allow_fp32_to_fp16 / Lite's preferred_fp32 (matrix ops in fp16, vector ops kept fp32)."""

    def __init__(self, dense: nn.Dense):
        super().__init__()
        self.dense = dense.to_float(ms.float16)

    def construct(self, x):
        return ops.cast(self.dense(ops.cast(x, ms.float16)), ms.float32)


def fp16_matmuls(cell: nn.Cell) -> nn.Cell:
    """Replace every nn.Dense inside SequentialCells of ``cell`` by Fp16Matmul (in place).
    Build a new PolicyCell afterwards: a compiled graph does not see later changes."""
    for _, sub in list(cell.cells_and_names()):
        if isinstance(sub, LSTM):
            sub.matmul = HalfMatMul()
        if isinstance(sub, nn.SequentialCell):
            for i in range(len(sub)):
                if isinstance(sub[i], nn.Dense):
                    sub[i] = Fp16Matmul(sub[i])
        for name, child in list(sub.name_cells().items()):
            if isinstance(child, nn.Dense) and not isinstance(sub, (nn.SequentialCell, Fp16Matmul)):
                setattr(sub, name, Fp16Matmul(child))
    return cell


def emulated_policy(run_dir: str, checkpoint: Optional[str], emulation: str) -> TrainCellPolicy:
    """The training cell of a run with ``emulation`` applied: fp32 (as trained), fp16-matmul (the
    Dense layers in float16 between float32 activations), fp16 (the whole cell in float16, float32
    input and output) or fp16-kept (fp16 but the parts of FP32_KEPT in float32: an fp16 export).
    Each call loads its own agent: the fp16 emulations change it in place."""
    pol = TrainCellPolicy(run_dir, checkpoint)
    wrap = CastState if pol.state_size else CastIO
    if emulation == "fp16":
        pol.cell = wrap(pol.cell.to_float(ms.float16), pol.spec.discrete)
    elif emulation == "fp16-kept":  # each part of the cell in float16, but FP32_KEPT's
        for name, child in pol.cell.name_cells().items():
            child.to_float(ms.float32 if name in FP32_KEPT else ms.float16)
        pol.cell = wrap(pol.cell, pol.spec.discrete, half_input=False)
    elif emulation == "fp16-matmul":
        fp16_matmuls(pol.agent)
        pol.cell = pol.agent.policy_cell()
    elif emulation != "fp32":
        raise ValueError(f"emulation {emulation!r}: expected fp32, fp16-matmul, fp16 or fp16-kept")
    return pol


DRIFT_STEPS = (1, 10, 100, 500)
"""The steps of a golden sequence at which a recurrent sweep reports the state's drift."""


def precision_sweep(run_dir: str, checkpoint: str, golden_obs: np.ndarray, golden_actions: np.ndarray,
                    golden_batch: int, episodes: int = 10, seed: int = 0, sequences: Optional[dict] = None) -> dict:
    """Each emulation on the golden set (a recurrent policy: ``sequences``, its golden sequences
    step-major, through the deployed loop, with the state's drift from the fp32 cell per step) and
    on seeded episodes (a recurrent policy carrying its own state)."""
    rows: List[dict] = []
    ref_returns = None
    for mode in MODES:
        pol = emulated_policy(run_dir, checkpoint, mode["emulation"])
        row = dict(mode)
        if sequences is not None:
            run = run_sequences(pol, sequences["obs"], sequences["episode_starts"])
            acts = run["actions"].reshape(golden_actions.shape)
            drift = np.maximum(np.abs(run["h"].astype(np.float64) - sequences["h"]).max(axis=(1, 2)),
                               np.abs(run["c"].astype(np.float64) - sequences["c"]).max(axis=(1, 2)))
            row["state_max_abs_error"] = float(drift.max())
            row["state_error_at_step"] = {str(t): float(drift[t - 1]) for t in DRIFT_STEPS if t <= len(drift)}
            row["state_error_per_step"] = [float(d) for d in drift]
        else:
            acts = pol.act_at_batch(golden_obs, golden_batch)
        if pol.spec.discrete:
            # per observation, as verify: a MultiDiscrete / MultiBinary action agrees when every dimension does
            same = (acts.astype(np.int64) == golden_actions.astype(np.int64)).reshape(len(golden_actions), -1)
            row["golden_agreement"] = float(same.all(axis=1).mean())
            if pol.spec.nvec:
                row["golden_agreement_per_dimension"] = [float(d.mean()) for d in same.T]
        else:
            err = np.abs(acts.astype(np.float64) - golden_actions.astype(np.float64))
            row["golden_max_abs_error"] = float(err.max())
            row["golden_mean_abs_error"] = float(err.mean())
        returns = run_episodes(pol.env_config(), pol.act, episodes, seed)["returns"] if episodes > 0 else []
        row["mean_return"] = float(np.mean(returns)) if returns else None
        if mode["emulation"] == "fp32":
            ref_returns = row["mean_return"]
        row["return_delta"] = (None if row["mean_return"] is None or ref_returns is None
                               else float(row["mean_return"] - ref_returns))
        rows.append(row)
    return {"episodes": episodes, "seed": seed, "rows": rows, "not_emulated": NOT_EMULATED}


def sweep_markdown(sweep: dict) -> str:
    discrete = "golden_agreement" in sweep["rows"][0]
    col = "golden agreement" if discrete else "golden max abs error (mean)"
    steps = list(sweep["rows"][0].get("state_error_at_step", {}))
    if "state_max_abs_error" in sweep["rows"][0]:
        col += " | state drift, max (at step " + " / ".join(steps) + ")"
    lines = ["# Precision sweep", "",
             f"Golden-set action error against the fp32 training cell, and mean return over {sweep['episodes']} "
             f"seeded episodes (seed {sweep['seed']}) with its delta to fp32. Emulated on the MindSpore CPU backend.", "",
             f"| emulation | ATC precision_mode | Lite precision_mode | {col} | mean return | return delta |",
             "| --- | --- | --- | --- | --- | --- |" + (" --- |" if steps else "")]
    per_dim = "golden_agreement_per_dimension" in sweep["rows"][0]
    if per_dim:
        lines[2] += (" A MultiDiscrete / MultiBinary action agrees when every dimension does; the agreement of "
                     "each dimension follows in brackets.")
    for r in sweep["rows"]:
        err = (f"{r['golden_agreement']:.4f}" if discrete
               else f"{r['golden_max_abs_error']:.3g} ({r['golden_mean_abs_error']:.3g})")
        if per_dim:
            err += " [" + ", ".join(f"{a:.4f}" for a in r["golden_agreement_per_dimension"]) + "]"
        if "state_max_abs_error" in r:
            err += f" | {r['state_max_abs_error']:.3g} (" + " / ".join(f"{r['state_error_at_step'][t]:.3g}" for t in steps) + ")"
        mr = "-" if r["mean_return"] is None else f"{r['mean_return']:.2f}"
        dl = "-" if r["return_delta"] is None else f"{r['return_delta']:+.2f}"
        lines.append(f"| {r['emulation']} | {r['atc']} | {r['lite']} | {err} | {mr} | {dl} |")
    for n in sweep["not_emulated"]:
        lines.append(f"| not emulated | {n['atc']} | {n['lite']} | {n['why']} | | |" + (" |" if steps else ""))
    return "\n".join(lines) + "\n"
