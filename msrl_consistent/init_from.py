"""``msrl train CONFIG --init-from RUN_DIR``: a new run whose networks start from another run's
parameters (an imported Stable-Baselines3 model, or any msrl run).

Narrow on purpose: the agent's Parameters (targets and observation-normalization statistics
included) come from RUN_DIR's newest checkpoint; the optimizer, the counters and the RNG streams
start fresh from the new config (a continuation with its own budget, not a resume:
``msrl train --resume`` is that). The new config must build the same network on the same spaces;
a difference is a ConfigError naming the key and both values, before anything trains.
"""
from __future__ import annotations

from typing import Any, List

import numpy as np

from .config import ConfigError

NETWORK_KEYS = ("net_arch", "critic_arch", "activation", "shared", "cnn", "grayscale", "resize", "recurrent",
                "lstm_hidden_size")
"""policy keys that shape the networks (the others change only their initialization or kernels)."""
ENV_KEYS = ("normalize_obs", "frame_stack")
ALGO_KEYS = ("use_sde",)


def check_args(args) -> None:
    """Refuse --init-from where it does not apply (before any directory is made)."""
    src = getattr(args, "init_from", None)
    if not src:
        return
    if args.resume or getattr(args, "seeds", None) is not None or args.workers > 1:
        raise ConfigError("--init-from starts one new run in one process; it does not combine with --resume, "
                          "--seeds or --workers")
    from .directories import RUN, expect
    expect(src, RUN)


def _spec_differences(a, b) -> List[str]:
    out = []
    for key in ("obs_kind", "obs_shape", "act_kind", "n_actions", "nvec", "frame_stack", "image_layout"):
        if tuple(np.atleast_1d(getattr(a, key))) != tuple(np.atleast_1d(getattr(b, key))):
            out.append(f"spaces: {key} {getattr(a, key)} vs {getattr(b, key)}")
    for key in ("act_low", "act_high"):
        x, y = getattr(a, key), getattr(b, key)
        if (x is None) != (y is None) or (x is not None and not np.array_equal(x, y)):
            out.append(f"spaces: {key} {x} vs {y}")
    return out


def differences(source_cfg, source_spec, cfg, spec) -> List[str]:
    """What differs between the source run and the new config that the parameters depend on."""
    out: List[str] = []

    def compare(section: str, keys, a: Any, b: Any) -> None:
        for key in keys:
            va, vb = getattr(a, key, None), getattr(b, key, None)
            if va != vb:
                out.append(f"{section}.{key}: {va!r} in the run, {vb!r} in the config")

    if source_cfg.algorithm != cfg.algorithm:
        out.append(f"algorithm: {source_cfg.algorithm!r} in the run, {cfg.algorithm!r} in the config")
        return out
    compare("policy", NETWORK_KEYS, source_cfg.policy, cfg.policy)
    compare("env", ENV_KEYS, source_cfg.env, cfg.env)
    compare("algo", ALGO_KEYS, source_cfg.algo, cfg.algo)
    return out + _spec_differences(source_spec, spec)


def init_from(algo, run_dir: str) -> str:
    """Set ``algo``'s agent (a freshly built Algorithm) from ``run_dir``'s newest checkpoint; returns
    the checkpoint's path. ConfigError when the networks or spaces differ."""
    from . import checkpoint as ckpt
    from .envs import env_spec
    from .runtime import read_run_config

    source_cfg = read_run_config(run_dir)
    diff = differences(source_cfg, env_spec(source_cfg.env), algo.cfg, algo.spec)
    if diff:
        raise ConfigError(f"--init-from {run_dir}: the config's network or spaces differ from the run's: "
                          f"{'; '.join(diff)}")
    path = ckpt.newest_intact(f"{run_dir}/checkpoints")
    if path is None:
        raise ckpt.CheckpointError(f"--init-from {run_dir}: the run has no intact checkpoint")
    tensors, meta = ckpt.load_checkpoint(path)
    algo.load_state(tensors, meta, source=path, training=False)
    algo.sync_normalizer()
    return path
