"""`msrl export`: the run's deterministic PolicyCell -> MindIR / ONNX / OM / Lite + manifest + golden set.

The steps, each in its own place: the formats planned and checked before any work
(:mod:`.writers`), the graph built from the very cell training evaluates, each format written,
the bundle (:mod:`.bundle`), the golden set (here), the manifest, all in a staging directory
renamed into place at the end (:func:`.bundle.staging`).
"""
from __future__ import annotations

import json
import os
from typing import Any, Iterable, Optional

import numpy as np

from msrl_consistent import manifest as mf
from msrl_consistent.checkpoint import atomic_write_text
from msrl_consistent.config import ConfigError
from msrl_consistent.deploy import FrameStack
from msrl_consistent.deploy.graph_io import graph_inputs, multi_input, obs_inputs
from msrl_consistent.deploy.sampling import GOLDEN_PREFIX
from msrl_consistent.deploy.sequences import run_sequences
from msrl_consistent.envs.recipe import host_wrappers, refuse_host_wrappers
from msrl_consistent.episodes import run_episodes
from msrl_consistent.runtime import TrainCellPolicy, provide_env

from .bundle import GOLDEN_FILE, build_manifest, check_out_dir, staging, write_bundle
from .writers import Graph, Options, parse_formats, plan, write_formats  # noqa: F401  (parse_formats: the CLI's)

GOLDEN_SEED = 20_240_601  # episodes used for the golden set are disjoint from eval seeds
GOLDEN_LANES = 2
"""A dynamic-batch recurrent export's golden sequences: this many envs stepped together."""


def parse_batch(text) -> object:
    if text in (None, "dynamic"):
        return "dynamic"
    try:
        b = int(text)
    except (TypeError, ValueError):
        raise ConfigError(f"--batch {text!r}: expected a positive integer or 'dynamic'") from None
    if b < 1:
        raise ConfigError(f"--batch {text!r}: expected a positive integer or 'dynamic'")
    return b


def golden_observations(policy: TrainCellPolicy, n: int, seed: int = GOLDEN_SEED) -> tuple:
    """3/4 states visited by deterministic rollouts, 1/4 uniform samples across the observation
    bounds (infinite bounds: the visited mean +- 3 std; images: uniform uint8 pixels). With frame
    stacking, the stacked rows the model consumed. Returns (obs, counts)."""
    n_roll = (3 * n) // 4
    episodes, ep = [], 0
    while sum(len(f) for f in episodes) < n_roll and ep < 1000:
        run = run_episodes(policy.env_config(), policy.act, 1, seed + ep, trajectories=True)
        episodes.append(np.asarray(run["episodes"][0]["obs"], policy.spec.input_dtype))
        ep += 1
    idx = np.linspace(0, sum(len(f) for f in episodes) - 1, n_roll).round().astype(int)
    rollout_obs = _rows_at(policy.spec, episodes, idx)
    rng = np.random.default_rng(seed)
    spec = policy.spec
    low, high = spec.obs_low.astype(np.float64), spec.obs_high.astype(np.float64)
    # The visited rows' statistics only where a bound needs them: an infinite bound, or bounds wider
    # than the +-1e3 window below (elsewhere that window is no narrower than the bounds, so a space
    # whose every bound is finite and at most 1e3 wide, as a camera's pixels, keeps its bounds). A
    # camera's float64 statistics over a 27,000-step Atari episode took more than 20 GB.
    if (~(np.isfinite(low) & np.isfinite(high) & (high - low <= 1e3))).any():
        visited = _rows_at(policy.spec, episodes, np.arange(sum(len(f) for f in episodes)))
        mean, std = visited.mean(0), np.maximum(visited.std(0), 1.0)
        low = np.where(np.isfinite(low), low, mean - 3 * std)
        high = np.where(np.isfinite(high), high, mean + 3 * std)
        # Bounds wider than float32 (e.g. +-3.4e38) are clipped to a range the net can see.
        low, high = np.maximum(low, mean - 1e3), np.minimum(high, mean + 1e3)
    bound_obs = spec.sample_obs(rng, low, high, n - n_roll)
    return np.concatenate([rollout_obs, bound_obs]), {"rollout": int(n_roll), "bounds": int(n - n_roll),
                                                      "episodes": ep, "seed": seed}


def _rows_at(spec, episodes: list, idx: np.ndarray) -> np.ndarray:
    """The rows the model consumed at the indices ``idx`` of the episodes' steps laid end to end:
    with frame stacking, each episode's frames through FrameStack, keeping only the rows asked for
    (a stacked raw Atari row is 403 KB: all 27,000 of an untrained policy's episode took > 20 GB)."""
    if not len(idx):
        return _rows_at(spec, episodes[:1], np.zeros(1, int))[:0]
    rows, start = [], 0
    for frames in episodes:
        want = idx[(idx >= start) & (idx < start + len(frames))] - start
        if spec.frame_stack <= 1:
            rows.append(frames[want])
        elif len(want):
            stack, keep = FrameStack(spec.frame_stack, spec.frame_dim), np.bincount(want, minlength=len(frames))
            for i in range(int(want.max()) + 1):
                row = stack.push(frames[i:i + 1])
                rows.extend([row] * int(keep[i]))
        start += len(frames)
    return np.concatenate(rows)


def golden_sequences(policy: TrainCellPolicy, lanes: int, steps: int, seed: int = GOLDEN_SEED) -> tuple:
    """A recurrent policy's golden sequences: in each of ``lanes`` lanes, seeded deterministic
    episodes of the training cell one after the other, cut at ``steps`` steps (episode_starts 1 at
    each episode's first step); then the training cell's deployed loop (the deploy package's
    RecurrentState) over them at ``lanes`` rows per call: its action, h and c at every step.
    Returns (arrays for golden.npz, rows step-major, and the manifest's counts)."""
    obs, starts, episodes = [], [], 0
    for lane in range(lanes):
        frames, flags = [], []
        while sum(len(f) for f in frames) < steps:
            run = run_episodes(policy.env_config(), policy.act, 1, seed + 1000 * lane + len(frames), trajectories=True)
            ep = np.asarray(run["episodes"][0]["obs"], policy.spec.input_dtype)
            frames.append(ep)
            flags.append(np.eye(1, len(ep), dtype=np.float32)[0])
            episodes += 1
        obs.append(np.concatenate(frames)[:steps])
        starts.append(np.concatenate(flags)[:steps])
    obs, starts = np.stack(obs, axis=1), np.stack(starts, axis=1)  # (steps, lanes, ...)
    ref = run_sequences(policy, obs, starts)
    flat = {"obs": obs, "actions": ref["actions"], "episode_starts": starts, "h": ref["h"], "c": ref["c"],
            **{k: v for k, v in ref.items() if k.startswith(GOLDEN_PREFIX)}}  # a distribution export's outputs
    arrays = {k: np.ascontiguousarray(v.reshape((steps * lanes,) + v.shape[2:])) for k, v in flat.items()}
    return arrays, {"rollout": steps * lanes, "bounds": 0, "episodes": episodes, "seed": seed,
                    "sequences": {"lanes": lanes, "steps": steps,
                                  "episode_starts": int(starts.sum())}}


OUTPUT_CHOICES = ("action", "distribution")


def parse_outputs(text) -> tuple:
    """``--outputs``: 'action' or 'action,distribution'."""
    names = tuple(t.strip() for t in str(text).split(",") if t.strip())
    if not names or names[0] != "action" or len(set(names)) != len(names) or not set(names) <= set(OUTPUT_CHOICES):
        raise ConfigError(f"--outputs {text!r}: expected 'action' or 'action,distribution'")
    return names



def export_run(run_dir: str, out_dir: str, checkpoint: Optional[str] = None, formats: Iterable[str] = ("mindir",),
               precision: str = "fp32", batch="dynamic", golden: int = 1024, force: bool = False,
               precision_sweep: bool = False, sweep_episodes: int = 10, outputs: Iterable[str] = ("action",),
               allow_host_wrappers: bool = False, env: Any = None, **options: Any) -> mf.Manifest:
    """Export a run's policy; returns the manifest. ``outputs``: ("action",) or ("action",
    "distribution"): the action distribution's parameters as further graph outputs
    (deploy.sampling). ``options``: the converters' (writers.Options: soc_version, precision_mode,
    lite_target, lite_precision_mode, preflight_only).

    A run whose env.wrappers change observations or actions outside the policy cell is refused
    (ConfigError naming them) unless ``allow_host_wrappers``; the manifest lists them either way
    (``host_preprocessing``). ``env``: the Python object the run was trained on with
    ``train(env=...)`` when it is not importable by name."""
    if precision not in ("fp32", "fp16"):
        raise ConfigError(f"--precision {precision!r}: expected fp32 or fp16")
    if golden < 1:
        raise ConfigError(f"--golden {golden}: expected a positive number of observations")
    outputs = parse_outputs(",".join(outputs))
    if "distribution" in outputs and (precision == "fp16" or precision_sweep):
        raise ConfigError("--outputs distribution is exported at --precision fp32 without --precision-sweep "
                          "(the fp16 emulation and the sweep cover the action only)")
    opts = Options(**options)
    formats = plan(formats, opts)
    check_out_dir(out_dir, force)
    if env is not None:
        provide_env(run_dir, env)
    reference = TrainCellPolicy(run_dir, checkpoint)
    host = host_wrappers(reference.cfg.env)
    if host and not allow_host_wrappers:
        raise ConfigError(refuse_host_wrappers(run_dir, host))
    if "distribution" in outputs:
        reference.with_distribution()  # a deterministic policy: ConfigError before any work
    with staging(out_dir) as tmp:
        graph = policy_graph(reference, run_dir, precision, batch, tmp)
        info = mf.ExportInfo(formats=formats, precision=precision, batch=batch, golden_batch=graph.golden_batch)
        if precision == "fp16":
            from .sweep import FP32_KEPT
            info.conversion["fp16"] = {"float32_parts": list(FP32_KEPT)}
        write_formats(graph, opts, info)
        write_bundle(tmp)
        arrays, counts = write_golden(tmp, reference, golden, graph.golden_batch)
        sweep = None
        if precision_sweep:
            sweep = write_sweep(tmp, run_dir, reference, arrays, graph.golden_batch, sweep_episodes)
        manifest = build_manifest(tmp, run_dir, reference, graph, info, len(arrays["obs"]), counts, sweep, host)
        mf.write_manifest(tmp, manifest)
    return manifest


def policy_graph(reference: TrainCellPolicy, run_dir: str, precision: str, batch, tmp: str) -> Graph:
    """The cell to export (the training cell itself; fp16: the same cell computing in float16 but
    for the parts float16 cannot hold),
    its graph inputs, and the golden set's batch (a recurrent one steps GOLDEN_LANES envs together)."""
    if precision == "fp16":  # float16 but the normalization and the action head (sweep.FP32_KEPT)
        from .sweep import emulated_policy
        cell = emulated_policy(run_dir, reference.checkpoint, "fp16-kept").cell
    elif reference.dist is not None:
        cell = reference.dist_cell  # the training cell's Parameters, the distribution's outputs after the action
    else:
        cell = reference.cell  # the very cell the training code evaluates
    obs_in = obs_inputs(reference.spec)
    if multi_input(obs_in):  # several sensors: the image keys' uint8 frames and a float32 row, joined in the graph
        from msrl_consistent.networks.multi_input import PackedInputs
        cell = PackedInputs(cell, obs_in)
    state = reference.state_size  # a recurrent policy's h and c units: graph inputs and outputs
    golden_batch = (GOLDEN_LANES if state else 1) if batch == "dynamic" else int(batch)
    return Graph(cell, obs_in, graph_inputs(obs_in, state), batch, golden_batch, tmp)


def write_golden(tmp: str, reference: TrainCellPolicy, golden: int, golden_batch: int) -> tuple:
    """golden.npz: ``golden`` observations and the training cell's actions at the golden batch (a
    recurrent policy: golden sequences). Returns (arrays, the manifest's counts)."""
    if reference.state_size:
        arrays, counts = golden_sequences(reference, golden_batch, -(-golden // golden_batch))
    else:
        obs, counts = golden_observations(reference, golden)
        arrays = {"obs": obs, "actions": reference.act_at_batch(obs, golden_batch)}
        if reference.dist is not None:  # the training cell's distribution at the same batch shape
            arrays.update({GOLDEN_PREFIX + k: v for k, v in reference.distribution_at_batch(obs, golden_batch).items()})
    with open(os.path.join(tmp, GOLDEN_FILE), "wb") as fh:
        np.savez(fh, **arrays)
    return arrays, counts


def write_sweep(tmp: str, run_dir: str, reference: TrainCellPolicy, arrays: dict, golden_batch: int,
                episodes: int) -> dict:
    """precision_sweep.json and .md: the fp32 / fp16-matmul / fp16 emulations against the golden set."""
    from .sweep import precision_sweep, sweep_markdown
    seqs = None if not reference.state_size else \
        {k: v.reshape((-1, golden_batch) + v.shape[1:]) for k, v in arrays.items()}
    sweep = precision_sweep(run_dir, reference.checkpoint, arrays["obs"], arrays["actions"], golden_batch, episodes,
                            sequences=seqs)
    atomic_write_text(os.path.join(tmp, "precision_sweep.json"), json.dumps(sweep, indent=2) + "\n")
    atomic_write_text(os.path.join(tmp, "precision_sweep.md"), sweep_markdown(sweep))
    return sweep
