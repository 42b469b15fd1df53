"""``import_model``: an SB3 model zip (or RL Zoo folder) -> an ordinary msrl run directory.

The run is built by msrl's own algorithm class (registry), its agent's Parameters set from SB3's
tensors (convert.parameters), VecNormalize's observation statistics put into the policy cell's
normalizer, and saved by the algorithm's own checkpoint writer: config.yaml,
checkpoints/final.safetensors and summary.json, written into a temporary sibling directory and
renamed into place at the end, so a refused input leaves nothing behind. ``msrl eval``, ``export``,
``verify`` and ``train --init-from`` take the result as any run directory.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any, Dict, Optional

import numpy as np

from ..config import ConfigError, dump_config, load_config
from . import archive, convert
from .check import compare_predictions, sb3_predictions
from .unpickle import read_vecnormalize

MSRL_EPS = 1e-8
"""The epsilon of msrl's ObsNormalizer: (obs - mean) / sqrt(var + 1e-8), clipped (SB3's formula)."""


def _close(a: Optional[np.ndarray], b: np.ndarray) -> bool:
    if a is None:
        return True  # SB3 summarized the bounds ("..."): the shape was checked
    a, b = np.broadcast_to(a, b.shape).astype(np.float64), np.asarray(b, np.float64)
    return bool(np.allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True) and np.array_equal(np.isinf(a), np.isinf(b)))


def check_spaces(model: archive.SB3Model, spec, env_id: str) -> None:  # noqa: C901  (one check per space kind)
    """The model's saved spaces against the environment's (msrl builds the cell from the env's)."""
    obs, act = model.observation_space, model.action_space
    where = f"{model.path}: data.observation_space"
    if obs["kind"] != "Box":
        raise ConfigError(f"{where} is {obs['kind']}; msrl import maps Box and image observations")
    if model.image:
        h, w, c = spec.image_hwc if spec.obs_kind == "Image" else (0, 0, 0)
        if spec.obs_kind != "Image" or spec.image_layout != "HWC" or obs["shape"] not in ((c, h, w), (h, w, c)):
            raise ConfigError(f"{where} has shape {obs['shape']} (CnnPolicy); {env_id} observes {spec.obs_kind} "
                              f"{tuple(spec.obs_shape)} (expected uint8 HWC frames of the transposed shape)")
    elif spec.obs_kind != "Box" or tuple(obs["shape"]) != tuple(spec.obs_shape):
        raise ConfigError(f"{where} has shape {obs['shape']}, {env_id} observes {spec.obs_kind} {tuple(spec.obs_shape)}")
    elif not (_close(obs.get("low"), spec.obs_low) and _close(obs.get("high"), spec.obs_high)):
        raise ConfigError(f"{where} has bounds {obs.get('low')} .. {obs.get('high')}, {env_id} has "
                          f"{spec.obs_low} .. {spec.obs_high}")
    where = f"{model.path}: data.action_space"
    if act["kind"] != spec.act_kind:
        raise ConfigError(f"{where} is {act['kind']}, {env_id} has {spec.act_kind} actions")
    if act["kind"] == "Discrete" and act.get("n") != spec.n_actions:
        raise ConfigError(f"{where} is Discrete({act.get('n')}), {env_id} has Discrete({spec.n_actions})")
    if act["kind"] == "MultiDiscrete" and list(np.asarray(act.get("nvec"), int).ravel()) != list(spec.nvec):
        raise ConfigError(f"{where} is MultiDiscrete({act.get('nvec')}), {env_id} has MultiDiscrete({list(spec.nvec)})")
    if act["kind"] in ("MultiBinary", "Box") and int(np.prod(act["shape"])) != spec.n_actions:
        raise ConfigError(f"{where} has shape {act['shape']}, {env_id}'s actions have {spec.n_actions} values")
    if act["kind"] == "Box" and not (_close(act.get("low"), spec.act_low) and _close(act.get("high"), spec.act_high)):
        raise ConfigError(f"{where} has bounds {act.get('low')} .. {act.get('high')}, {env_id} has "
                          f"{spec.act_low} .. {spec.act_high}")


def read_vecnorm(path: str, obs_dim: int, image: bool) -> dict:
    with open(path, "rb") as fh:
        state = read_vecnormalize(fh.read(), path)
    if state.get("norm_obs_keys"):
        raise ConfigError(f"{path}: norm_obs_keys {state['norm_obs_keys']!r} (Dict observations) are refused")
    rms = state.get("obs_rms")
    if state.get("norm_obs"):
        if image:
            raise ConfigError(f"{path}: normalizes image observations (norm_obs); msrl's image cell takes raw frames")
        if not isinstance(rms, dict) or np.asarray(rms.get("mean")).size != obs_dim:
            raise ConfigError(f"{path}: obs_rms.mean has {np.asarray((rms or {}).get('mean')).size} values, the "
                              f"observation {obs_dim}")
    for key, default in (("clip_obs", 10.0), ("clip_reward", 10.0), ("epsilon", 1e-8), ("gamma", 0.99)):
        state[key] = float(state.get(key, default))
    state["norm_obs"], state["norm_reward"] = bool(state.get("norm_obs")), bool(state.get("norm_reward"))
    return state


def _env_id(model: archive.SB3Model, env: Optional[str]) -> str:
    if env:
        return env
    if model.zoo_env:
        return model.zoo_env
    raise ConfigError(f"{model.path}: an SB3 zip does not record its environment; pass --env ID (the gymnasium id "
                      f"it was trained on)")


def _build(model: archive.SB3Model, env_id: str, vecnorm_path: Optional[str]):
    """The msrl algorithm object holding SB3's weights, and the summary's notes."""
    from mindspore import Tensor

    from .. import registry
    from ..envs import env_spec
    from ..networks.agents import named_parameters

    algo_name = convert.MSRL_ALGORITHM[model.algorithm]
    env_probe = load_config(None, data={"algorithm": algo_name, "env": {"id": env_id}}).env
    spec = env_spec(env_probe)
    check_spaces(model, spec, env_id)
    vecnorm = read_vecnorm(vecnorm_path, spec.obs_dim, model.image) if vecnorm_path else None
    data, notes = convert.config_data(model, env_id, vecnorm, registry.config_class(algo_name))
    try:
        cfg = load_config(None, data=data)
    except ConfigError as exc:  # SB3's hyperparameters together break one of msrl's cross-field checks
        data["algo"] = {"use_sde": True} if notes["use_sde"] else {}
        notes.update(hyperparameters_carried=[], hyperparameters_refused=str(exc))
        cfg = load_config(None, data=data)
    algo = registry.get(algo_name)(cfg)
    params = named_parameters(algo.agent)
    values = convert.parameters(model, {k: tuple(p.shape) for k, p in params.items()}, notes["use_sde"])
    for name, arr in values.items():
        params[name].set_data(Tensor(arr))
    if vecnorm is not None and vecnorm["norm_obs"]:
        rms = vecnorm["obs_rms"]
        # SB3 divides by sqrt(var + epsilon), msrl by sqrt(var + 1e-8): the stored var carries the difference
        var = np.asarray(rms["var"], np.float64).ravel() + (vecnorm["epsilon"] - MSRL_EPS)
        algo.obs_rms.load({"mean": np.asarray(rms["mean"], np.float64).ravel(), "var": var,
                           "count": np.asarray([float(rms.get("count", 1e-4))])})
        algo.sync_normalizer()
        notes["vecnormalize"] = {"file": os.path.abspath(vecnorm_path), "epsilon": vecnorm["epsilon"],
                                 "clip_obs": vecnorm["clip_obs"], "count": float(rms.get("count", 0.0)),
                                 "var_offset": vecnorm["epsilon"] - MSRL_EPS}
    return algo, cfg, spec, notes


def import_model(source: str, out: str, vecnormalize: Optional[str] = None, env: Optional[str] = None,
                 check: Optional[str] = None) -> Dict[str, Any]:
    """Import ``source`` (an SB3 zip or an RL Zoo log folder) into the new run directory ``out``
    and return its summary. ``check``: a .npz of ``obs`` and SB3's deterministic ``actions``, or
    ``"sb3"`` (Stable-Baselines3 loads the zip itself, which runs its pickles: trusted files only);
    the comparison goes into the summary (``summary["check"]["passed"]``)."""
    if os.path.lexists(out):
        raise ConfigError(f"--out {out} already exists; msrl import writes a new run directory")
    model = archive.read_model(source)
    vecnormalize = vecnormalize or model.vecnormalize
    env_id = _env_id(model, env)
    parent = os.path.dirname(os.path.abspath(out))
    algo, cfg, spec, notes = _build(model, env_id, vecnormalize)
    os.makedirs(parent, exist_ok=True)  # as msrl train makes runs/ for --run-dir runs/NAME
    tmp = os.path.join(parent, f".{os.path.basename(os.path.abspath(out))}.import-{os.getpid()}")
    try:
        os.makedirs(os.path.join(tmp, "checkpoints"))
        from ..checkpoint import atomic_write_text
        atomic_write_text(os.path.join(tmp, "config.yaml"), dump_config(cfg))
        algo.save(os.path.join(tmp, "checkpoints", "final.safetensors"))
        summary: Dict[str, Any] = {
            "imported_from": {"path": os.path.abspath(source), "sb3_algorithm": model.algorithm,
                              "policy_class": model.policy_class, "sb3_version": model.sb3_version,
                              "num_timesteps": int(model.data.get("num_timesteps") or 0), **notes},
            "algorithm": cfg.algorithm, "env": env_id, "num_timesteps": 0, "params_sha256": algo.params_hash()}
        if check:
            if check == "sb3":
                obs, actions = sb3_predictions(source if not os.path.isdir(source) else model.path, cfg.env,
                                               vecnormalize, spec)
                summary["check"] = compare_predictions(tmp, obs, actions, "sb3 predict(deterministic=True)")
            else:
                summary["check"] = compare_predictions(tmp, *_read_predictions(check, spec), check)
        atomic_write_text(os.path.join(tmp, "summary.json"), json.dumps(summary, indent=2) + "\n")
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return summary


def _read_predictions(path: str, spec):
    try:
        with np.load(path, allow_pickle=False) as z:
            obs, actions = np.asarray(z["obs"]), np.asarray(z["actions"])
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"--check {path}: expected a .npz with arrays 'obs' and 'actions' ({exc})") from None
    if len(obs) != len(actions) or len(obs) == 0:
        raise ConfigError(f"--check {path}: 'obs' has {len(obs)} rows and 'actions' {len(actions)}, expected the "
                          f"same positive number")
    return obs, actions
