"""Golden sequences of a recurrent export, checked step by step through the deployed loop.

A recurrent export's golden set is ``lanes`` envs stepped together for ``steps`` steps: whole
seeded episodes of the training cell, one after the other in each lane (``episode_starts`` 1 at
each episode's first step), with the training cell's action and state (h, c) after every step.
:func:`sequence_check` runs the deployed policy's own loop over them (``reset()``, then at each
step ``reset(mask)`` where an episode starts and ``act(obs)``: the state carried by
:class:`~.recurrent.RecurrentState`), records what the loop gave the graph and what the graph
returned, and compares every step: the action error, the h / c error, the first divergence. A state element agrees within
``atol * max(1, |reference|)``: absolute for h (bounded by 1), relative for large c.

When they differ, it says why, with two kinds of evidence that do not need the training cell:

* the loop: the state given to the graph at step t must be the one it returned at step t - 1
  (else the state is not fed back), and the episode_start flags the ones of the sequence (a
  flag one step late or early is named);
* the graph: with episode_start 0 its next state must depend on the state inputs (else a
  fixed initial state is inside the graph), and with episode_start 1 a non-zero state must give
  the zero state's outputs (else the graph does not reset).
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

from .compare import compare_actions
from .sampling import GOLDEN_PREFIX, kl_report, split_outputs


def run_sequences(policy: Any, obs: np.ndarray, starts: np.ndarray) -> Dict[str, np.ndarray]:
    """The deployed loop over sequences: ``obs`` (steps, lanes, ...), ``starts`` (steps, lanes).
    -> actions (steps, lanes, ...) and, per step, what the graph was given (h_in, c_in, s_in) and
    returned (h, c; a distribution export's outputs as ``dist_<output>``)."""
    dist = getattr(policy, "dist", None)  # a distribution export's outputs are recorded too
    keys = ("h_in", "c_in", "s_in", "h", "c") + tuple(GOLDEN_PREFIX + n for n in (dist.outputs if dist else ()))
    log: Dict[str, List[np.ndarray]] = {k: [] for k in keys}
    inner = policy._run_step

    def recorded(x, h, c, s):
        if dist is None:
            a, h2, c2 = inner(x, h, c, s)
            params = []
        else:
            outs = policy._run_step_outputs(x, h, c, s)
            a, h2, c2 = outs[:3]
            params = list(split_outputs(dist, outs[3:]).values())
        for k, v in zip(keys, [h, c, s, h2, c2] + params):
            log[k].append(np.array(v, np.float32, copy=True))
        return a, h2, c2

    policy._run_step = recorded  # an instance attribute over the method, removed below
    try:
        policy.reset()
        actions = []
        for t in range(len(obs)):
            if t and starts[t].any():
                policy.reset(starts[t] > 0)
            actions.append(np.asarray(policy.act(obs[t])))
    finally:
        del policy._run_step
    out = {k: _rows(v, len(obs)) for k, v in log.items()}
    out["actions"] = np.stack(actions)
    return out


def _rows(parts: List[np.ndarray], steps: int) -> np.ndarray:
    """One array per step (a fixed-batch artifact is called in chunks: the chunks joined)."""
    per = len(parts) // max(steps, 1)
    return np.stack([np.concatenate(parts[t * per:(t + 1) * per]) for t in range(steps)])


def loop_faults(run: Dict[str, np.ndarray], starts: np.ndarray) -> List[str]:
    """What the deployed loop gave the graph, against the contract: the state fed back, the flags."""
    faults = []
    for t in range(1, len(starts)):
        if not (np.array_equal(run["h_in"][t], run["h"][t - 1]) and np.array_equal(run["c_in"][t], run["c"][t - 1])):
            faults.append(f"state not fed back: at step {t} the loop gave the graph a state that is not the h_next, "
                          f"c_next it returned at step {t - 1}")
            break
    s_in = run["s_in"]
    if not np.array_equal(s_in, starts):
        t = int(np.nonzero((s_in != starts).any(axis=1))[0][0])
        late = len(starts) > 2 and np.array_equal(s_in[2:], starts[1:-1]) and starts[1:-1].any()
        early = len(starts) > 2 and np.array_equal(s_in[1:-1], starts[2:]) and starts[2:].any()
        kind = ("reset one step late: each episode_start flag reaches the graph one step after the episode "
                "started" if late else "reset one step early: each episode_start flag reaches the graph one step "
                "before the episode starts" if early else "episode_start flags differ from the episode starts")
        faults.append(f"{kind} (first at step {t}: given {s_in[t].tolist()}, expected {starts[t].tolist()})")
    return faults


def graph_faults(run_step, x: np.ndarray, hidden: int, atol: float) -> List[str]:
    """The graph's state contract on the rows ``x``: the next state depends on the state inputs
    (episode_start 0), and episode_start 1 zeroes them (the zero state's outputs)."""
    rng = np.random.default_rng(0)
    n = x.shape[0]
    h = rng.uniform(-0.9, 0.9, (n, hidden)).astype(np.float32)
    c = rng.normal(0.0, 1.0, (n, hidden)).astype(np.float32)
    zero = np.zeros_like(h)
    _, h0, c0 = run_step(x, zero, zero, np.zeros(n, np.float32))
    _, h1, c1 = run_step(x, h, c, np.zeros(n, np.float32))
    _, hr, cr = run_step(x, h, c, np.ones(n, np.float32))
    faults = []
    if np.array_equal(h1, h0) and np.array_equal(c1, c0):
        faults.append("a fixed initial state inside the graph: with episode_start 0 its h_next, c_next do not "
                      "depend on the state inputs h, c")
    err = max(_max_err(hr, h0), _max_err(cr, c0))
    if err > atol:
        faults.append(f"the graph does not reset the state where episode_start = 1: from a non-zero state its "
                      f"h_next, c_next differ from the zero state's by {err:.3g} (atol {atol:g})")
    return faults


def _max_err(a, b) -> float:
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    return float(np.where(np.isnan(err), np.inf, err).max()) if err.size else 0.0


def state_errors(h, c, ref_h, ref_c) -> Dict[str, Any]:
    """How far states (h, c) are from the reference's, step by step along axis 0: the largest
    absolute h and c errors, and per step the largest error scaled by max(1, |reference|), the
    state criterion (h is bounded by 1, c is not: |c| reaches ~10 on a trained CartPoleNoVel
    policy, and float32's rounding grows with the magnitude). NaN counts as an infinite error."""
    errs = {k: np.abs(np.asarray(a, np.float64) - np.asarray(r, np.float64)) for k, a, r in (("h", h, ref_h), ("c", c, ref_c))}
    axes = tuple(range(1, errs["h"].ndim))
    scaled = np.maximum(*(np.nan_to_num(e / np.maximum(1.0, np.abs(np.asarray(r, np.float64))), nan=np.inf).max(axis=axes)
                          for e, r in ((errs["h"], ref_h), (errs["c"], ref_c))))
    out: Dict[str, Any] = {f"max_{k}_error": float(np.nan_to_num(e, nan=np.inf).max()) if e.size else 0.0
                           for k, e in errs.items()}
    out["max_state_error"] = max(out["max_h_error"], out["max_c_error"])
    out["max_state_error_scaled"] = float(scaled.max()) if scaled.size else 0.0
    out["state_error_per_step"] = [float(e) for e in scaled]
    return out


def sequence_check(policy: Any, export: Any, atol: float) -> Tuple[dict, Dict[str, np.ndarray]]:
    """The golden sequences through ``policy``'s deployed loop, step by step (see the module):
    (the figures, the loop's outputs: ``run_sequences``' actions and states per step)."""
    g = export.golden_sequences()
    steps, lanes = g["episode_starts"].shape
    run = run_sequences(policy, g["obs"], g["episode_starts"])
    res: Dict[str, Any] = {"sequences": {"lanes": lanes, "steps": steps}, "count": steps * lanes}
    act = compare_actions(run["actions"].reshape((steps * lanes,) + run["actions"].shape[2:]),
                          g["actions"].reshape((steps * lanes,) + g["actions"].shape[2:]), export.spec.discrete, atol)
    if act.get("shape_mismatch"):
        res.update(passed=False, first_mismatch=0, output_mismatch=(
            f"artifact returns actions of shape {act['pred_shape']}, the training cell {act['ref_shape']}"))
        return res, run
    res.update({k: v for k, v in act.items() if k not in ("count", "passed", "first_mismatch")})
    res.update(state_errors(run["h"], run["c"], g["h"], g["c"]))
    if export.distribution is not None:  # KL at every step, the state carried by the deployed loop
        flat = {k: v.reshape((steps * lanes,) + v.shape[2:]) for k, v in run.items() if k.startswith(GOLDEN_PREFIX)}
        res["distribution"] = kl_report(export.distribution, export.golden_distribution(),
                                        {k[len(GOLDEN_PREFIX):]: v for k, v in flat.items()})
    state_err = np.asarray(res["state_error_per_step"])
    bad_act = act["first_mismatch"]
    bad_state = np.nonzero(state_err > atol)[0]
    first = None
    if bad_act is not None:
        first = {"step": bad_act // lanes, "lane": bad_act % lanes, "what": "action"}
    if bad_state.size and (first is None or bad_state[0] < first["step"]):
        first = {"step": int(bad_state[0]), "what": "state", "error": float(state_err[bad_state[0]])}
    res["first_divergence"] = first
    res["first_mismatch"] = None if first is None else first["step"]
    res["passed"] = first is None
    if first is not None:  # why: the loop's evidence, then the graph's
        mid = g["obs"][steps // 2]
        res["faults"] = loop_faults(run, g["episode_starts"]) + graph_faults(
            policy.run_step_batched, policy.validate(mid), export.state_size, atol)
    return res, run
