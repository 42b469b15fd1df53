"""`msrl export`: the run's deterministic PolicyCell -> MindIR / ONNX / OM + manifest + golden set.

Everything is written into a temporary sibling directory and renamed into place at the
end, so an interrupted or failed export never leaves a half-written export directory, and
an existing export is only replaced (with ``force``) once the new one is complete.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Iterable, Optional

import numpy as np

from msrl_consistent import manifest as mf
from msrl_consistent.checkpoint import atomic_write_text
from msrl_consistent.config import ConfigError, to_dict
from msrl_consistent.deploy import SCHEMA_VERSION, FrameStack, file_sha256
from msrl_consistent.deploy.graph_io import graph_inputs, inputs_io, multi_input, obs_inputs
from msrl_consistent.deploy.recurrent import state_io
from msrl_consistent.deploy.sequences import run_sequences
from msrl_consistent.episodes import run_episodes
from msrl_consistent.runtime import TrainCellPolicy

from .lite import LITE_FILE, write_lite
from .lite import check_options as check_lite_options
from .mindir import write_mindir
from .om import ATC_PRECISION_MODES, DEFAULT_PRECISION_MODE, find_atc, write_om
from .onnx import INPUT_NAME, OUTPUT_NAME, require_onnx, write_onnx
from .preflight import preflight, require_pass

FORMATS = ("mindir", "onnx", "om", "lite")
GOLDEN_SEED = 20_240_601  # episodes used for the golden set are disjoint from eval seeds
GOLDEN_LANES = 2
"""A dynamic-batch recurrent export's golden sequences: this many envs stepped together."""


def parse_formats(text: str) -> list:
    formats = [f.strip().lower() for f in text.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ConfigError(f"--format {text!r}: expected a comma-separated subset of {', '.join(FORMATS)}")
    if "mindir" not in formats:
        formats.insert(0, "mindir")  # the reference artifact (verify, Lite) is always written
    return formats


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
    flat = {"obs": obs, "actions": ref["actions"], "episode_starts": starts, "h": ref["h"], "c": ref["c"]}
    arrays = {k: np.ascontiguousarray(v.reshape((steps * lanes,) + v.shape[2:])) for k, v in flat.items()}
    return arrays, {"rollout": steps * lanes, "bounds": 0, "episodes": episodes, "seed": seed,
                    "sequences": {"lanes": lanes, "steps": steps,
                                  "episode_starts": int(starts.sum())}}


# one linear pipeline (validate, each format, golden set, manifest, swap): its branches are options
def _check_om_options(formats: list, soc_version: Optional[str], precision_mode: Optional[str],
                      preflight_only: bool) -> str:
    """--format om's options (ATC's precision mode, explicit); ATC present unless only the pre-flight runs."""
    if preflight_only and "om" not in formats:
        raise ConfigError("--preflight-only checks what ATC would refuse: it needs --format om")
    if "om" not in formats:
        return precision_mode or DEFAULT_PRECISION_MODE
    if not soc_version and not preflight_only:
        raise ConfigError("--format om needs --soc-version (for example Ascend310P3)")
    precision_mode = precision_mode or DEFAULT_PRECISION_MODE
    if precision_mode not in ATC_PRECISION_MODES:
        raise ConfigError(f"--precision-mode {precision_mode!r}: expected one of {', '.join(ATC_PRECISION_MODES)}")
    if not preflight_only:
        find_atc()  # fail before any work when CANN is missing
    return precision_mode


# one linear pipeline (validate, each format, golden set, manifest, swap): its branches are options
def export_run(run_dir: str, out_dir: str, checkpoint: Optional[str] = None, formats: Iterable[str] = ("mindir",),  # noqa: C901
               precision: str = "fp32", batch="dynamic", golden: int = 1024, soc_version: Optional[str] = None,
               precision_mode: Optional[str] = None, force: bool = False,
               precision_sweep: bool = False, sweep_episodes: int = 10, lite_target: str = "cpu",
               lite_precision_mode: Optional[str] = None, preflight_only: bool = False) -> mf.Manifest:
    """Export a run's policy; returns the manifest. ``preflight_only``: with --format om, the ATC
    pre-flight in place of ATC (no actor.om; the pre-flight's report in the manifest)."""
    formats = list(formats)
    if precision not in ("fp32", "fp16"):
        raise ConfigError(f"--precision {precision!r}: expected fp32 or fp16")
    if golden < 1:
        raise ConfigError(f"--golden {golden}: expected a positive number of observations")
    precision_mode = _check_om_options(formats, soc_version, precision_mode, preflight_only)
    if "lite" in formats:
        lite_precision_mode = check_lite_options(lite_target, lite_precision_mode)
    if ("om" in formats or "lite" in formats) and "onnx" not in formats:
        formats.insert(formats.index("om" if "om" in formats else "lite"), "onnx")  # ATC and Lite convert the ONNX graph
    if "onnx" in formats:
        require_onnx()  # fail before any work when the onnx package is missing
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)) and not force:
        raise ConfigError(f"output directory {out_dir} exists and is not empty; pass --force to replace it")

    reference = TrainCellPolicy(run_dir, checkpoint)
    state = reference.state_size  # a recurrent policy's h and c units: graph inputs and outputs
    spec = reference.spec
    if precision == "fp16":
        from .sweep import emulated_policy
        cell = emulated_policy(run_dir, reference.checkpoint, "fp16").cell
    else:
        cell = reference.cell  # the very cell the training code evaluates
    obs_in = obs_inputs(spec)
    inputs = graph_inputs(obs_in, state)  # the graph's inputs in order: observation input(s), then the state
    if multi_input(obs_in):  # several sensors: the image keys' uint8 frames and a float32 row, joined in the graph
        from msrl_consistent.networks.multi_input import PackedInputs
        cell = PackedInputs(cell, obs_in)
    # the batch of the golden set's reference calls; a recurrent one steps GOLDEN_LANES envs together
    golden_batch = (GOLDEN_LANES if state else 1) if batch == "dynamic" else int(batch)

    parent = os.path.dirname(os.path.abspath(out_dir)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(os.path.abspath(out_dir))}.tmp-{os.getpid()}")
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    try:
        export_info = mf.ExportInfo(formats=formats, precision=precision, batch=batch, golden_batch=golden_batch)
        conversion = export_info.conversion
        write_mindir(cell, inputs, batch, os.path.join(tmp, "actor.mindir"))
        if "onnx" in formats:
            export_info.onnx = write_onnx(cell, inputs, golden_batch, os.path.join(tmp, "actor.onnx"),
                                          dynamic=batch == "dynamic" and ("om" not in formats or preflight_only))
        if "om" in formats:
            report = preflight(os.path.join(tmp, "actor.onnx"), precision_mode)
            require_pass(report)  # before ATC runs, naming the operator ATC would refuse
            conversion["atc_preflight"] = report
            if preflight_only:
                formats.remove("om")
            else:
                conversion["om"] = write_om(os.path.join(tmp, "actor.onnx"), os.path.join(tmp, "actor.om"), inputs,
                                            golden_batch, soc_version, precision_mode)
        if "lite" in formats:
            conversion["lite"] = write_lite(os.path.join(tmp, "actor.onnx"), os.path.join(tmp, LITE_FILE), lite_target,
                                            lite_precision_mode)

        write_bundle(tmp)

        if state:
            arrays, counts = golden_sequences(reference, golden_batch, -(-golden // golden_batch))
            obs = arrays["obs"]
        else:
            obs, counts = golden_observations(reference, golden)
            arrays = {"obs": obs, "actions": reference.act_at_batch(obs, golden_batch)}
        with open(os.path.join(tmp, "golden.npz"), "wb") as fh:
            np.savez(fh, **arrays)
        sweep = None
        if precision_sweep:
            from .sweep import precision_sweep as run_sweep
            from .sweep import sweep_markdown
            seqs = None if not state else {k: v.reshape((-1, golden_batch) + v.shape[1:]) for k, v in arrays.items()}
            sweep = run_sweep(run_dir, reference.checkpoint, obs, arrays["actions"], golden_batch, sweep_episodes,
                              sequences=seqs)
            atomic_write_text(os.path.join(tmp, "precision_sweep.json"), json.dumps(sweep, indent=2) + "\n")
            atomic_write_text(os.path.join(tmp, "precision_sweep.md"), sweep_markdown(sweep))

        files = {name: file_sha256(os.path.join(tmp, name)) for name in sorted(os.listdir(tmp))}
        out_dtype = "int32" if spec.discrete else "float32"
        io_batch = None if batch == "dynamic" else golden_batch
        out_shape = [io_batch] + list(spec.action_shape)
        versions = mf.versions()
        manifest = mf.Manifest(
            schema_version=SCHEMA_VERSION,
            created=mf.now_iso(),
            msrl_version=versions["msrl_consistent"],
            versions=versions,
            algorithm=reference.cfg.algorithm,
            env_id=reference.cfg.env.id,
            env=to_dict(reference.cfg.env),
            spaces=spec.to_json(),
            source=mf.Source(run_dir=os.path.abspath(run_dir), checkpoint=os.path.abspath(reference.checkpoint),
                             checkpoint_sha256=file_sha256(reference.checkpoint), config=to_dict(reference.cfg)),
            export=export_info,
            io={**({"inputs": inputs_io(obs_in, io_batch)} if multi_input(obs_in) else
                   {"input": {"name": INPUT_NAME, "shape": [io_batch, spec.obs_dim], "dtype": spec.input_dtype}}),
                "output": {"name": OUTPUT_NAME, "shape": out_shape, "dtype": out_dtype},
                "post_processing": _post_processing(spec, reference.agent.squash),
                **({"state": state_io(state, io_batch)} if state else {})},
            files=files,
            golden=mf.GoldenInfo(file="golden.npz", count=int(len(obs)), batch=golden_batch,
                                 reference="training cell, fp32", **counts),
            precision_sweep=None if sweep is None else {  # the per-step drift stays in precision_sweep.json
                "file": "precision_sweep.md",
                "rows": [{k: v for k, v in r.items() if k != "state_error_per_step"} for r in sweep["rows"]]},
        )
        mf.write_manifest(tmp, manifest)
        _swap_into_place(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


BUNDLE_ENTRY = '''"""This export's loader and self-check, without msrl installed (the standard library, NumPy and a
backend library: onnxruntime, mindspore_lite, ais_bench/aclruntime for OM, or mindspore).

    python policy.py check [--backend B]        # sha256 of every file, the golden set, latency; exit 0 / 1 / 2
    from policy import load; pi = load(".", backend="onnxruntime"); action = pi.act(obs)

The code is the msrl_deploy package, imported from msrl_deploy.zip beside this file; both files'
sha256 are in manifest.json.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "msrl_deploy.zip"))

try:
    from msrl_deploy import *  # noqa: F401,F403  (load, check, Policy, ...)
    from msrl_deploy import main as _main
except Exception as exc:  # msrl_deploy.zip missing or damaged: the sha256 check cannot even start
    if __name__ != "__main__":
        raise
    print(f"policy.py: error: msrl_deploy.zip beside this file cannot be imported ({type(exc).__name__}: "
          f"{exc}); copy the whole export directory again", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(_main(default_dir=HERE))
'''


def write_bundle(directory: str) -> str:
    """Ship the deploy package into the export: ``msrl_deploy.zip`` (msrl_consistent/deploy/*.py as the
    package ``msrl_deploy``, imported from the zip; the entries sorted and dated 1980-01-01, so the
    same package gives the same bytes) and the ``policy.py`` entry. With NumPy and a backend library
    the directory loads and checks itself (``python policy.py check``) without msrl."""
    import zipfile

    from msrl_consistent import deploy
    pkg = os.path.dirname(deploy.__file__)
    zpath = os.path.join(directory, deploy.BUNDLE_PACKAGE)
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(f for f in os.listdir(pkg) if f.endswith(".py")):
            info = zipfile.ZipInfo(f"msrl_deploy/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with open(os.path.join(pkg, name), "rb") as fh:
                z.writestr(info, fh.read())
    dst = os.path.join(directory, deploy.BUNDLE_FILE)
    with open(dst, "w", encoding="utf-8") as fh:
        fh.write(BUNDLE_ENTRY)
    return dst


def _post_processing(spec, squash: bool) -> str:
    if spec.act_kind == "MultiDiscrete":
        return f"argmax over each logit segment of nvec {list(spec.nvec)}, int32 (B, {spec.n_actions})"
    if spec.act_kind == "MultiBinary":
        return f"logit > 0 (p > 0.5) per dimension, int32 (B, {spec.n_actions})"
    if spec.discrete:
        return "argmax over logits, int32"
    if squash:
        return "low + (tanh(u) + 1) / 2 * (high - low), clipped to [low, high]"
    return "Gaussian mean clipped to [low, high]"


def _swap_into_place(tmp: str, out_dir: str) -> None:
    """Rename the finished export into place; an existing one is removed only after that."""
    if os.path.isdir(out_dir):
        old = f"{tmp}.old"
        os.replace(out_dir, old)
        try:
            os.replace(tmp, out_dir)
        except BaseException:
            os.replace(old, out_dir)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out_dir)
