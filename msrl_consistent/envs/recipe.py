"""What a run records of its environment (the recipe), and which of its wrappers a board must repeat.

The recipe is written into the run's summary.json, every checkpoint's metadata and the export's
manifest.json: the id or entry point, the constructor kwargs, the wrappers with their kwargs and
kinds, the modules imported for it (an installed package's version, a module file's path and
sha256) and gymnasium's version. ``config.yaml`` holds the same keys, from which ``eval``,
``export``, ``verify`` and ``replay`` rebuild the environment.

A wrapper that changes observations or actions is **host preprocessing**: the exported graph
does not hold it, so a board must repeat it before (or after) every call. ``msrl export`` lists
such wrappers in the manifest and refuses to export without ``--allow-host-wrappers``;
:data:`IN_CELL` names the msrl config keys that do the common ones inside the policy cell.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import sys
from typing import Any, Dict, List, Optional

import gymnasium as gym

from ..config import EnvConfig
from .make import IN_PROCESS, split_entry, wrapper_class

BOOKKEEPING = {"TimeLimit", "RecordEpisodeStatistics", "OrderEnforcing", "PassiveEnvChecker", "RecordVideo",
               "HumanRendering", "RenderCollection", "NormalizeReward", "TransformReward", "ClipReward"}
"""gymnasium wrappers that change neither observations nor actions (episode limits, statistics,
rendering, rewards): nothing for a board to repeat."""

IN_CELL = {
    "NormalizeObservation": "env.normalize_obs: true (the running mean/std inside the policy cell)",
    "FrameStackObservation": "env.frame_stack: K (the bundle's FrameStack, recorded in the manifest)",
    "GrayscaleObservation": "policy.grayscale: true",
    "ResizeObservation": "policy.resize: [height, width]",
    "MaxAndSkipObservation": "env.max_and_skip: K",
    "ClipAction": "nothing: the policy cell clips Gaussian actions to the action space's bounds",
    "RescaleAction": "nothing: the policy cell acts in the environment's own action bounds",
    "FlattenObservation": "nothing for a Box or a Dict of Boxes: the cell flattens them",
}
"""The msrl config key that does a common gymnasium wrapper's work inside the exported graph."""


def wrapper_kind(cls: Any) -> str:
    """observation, action, reward, bookkeeping, or unknown (a wrapper that may change either)."""
    if isinstance(cls, type):
        for base, kind in ((gym.ObservationWrapper, "observation"), (gym.ActionWrapper, "action"),
                           (gym.RewardWrapper, "reward")):
            if issubclass(cls, base):
                return kind
        if cls.__name__ in BOOKKEEPING and cls.__module__.startswith("gymnasium"):
            return "bookkeeping"
    return "unknown"


def wrappers(env_cfg: EnvConfig) -> List[Dict[str, Any]]:
    """The config's wrappers with their kind and whether a board must repeat them (``host``)."""
    out = []
    for i, w in enumerate(env_cfg.wrappers):
        cls = wrapper_class(w.entry, f"env.wrappers[{i}].entry")
        kind = wrapper_kind(cls)
        name = getattr(cls, "__name__", "")
        row = {"entry": w.entry, "kwargs": dict(w.kwargs), "kind": kind,
               "host": kind in ("observation", "action", "unknown")}
        if row["host"] and name in IN_CELL:
            row["in_cell"] = IN_CELL[name]
        out.append(row)
    return out


def host_wrappers(env_cfg: EnvConfig) -> List[Dict[str, Any]]:
    return [w for w in wrappers(env_cfg) if w["host"]]


def refuse_host_wrappers(run_dir: str, host: List[Dict[str, Any]]) -> str:
    """Why ``msrl export`` stops for host wrappers: each named, with where its work can move."""
    named = "; ".join(f"{w['entry']} ({w['kind']}{': in the cell: ' + w['in_cell'] if 'in_cell' in w else ''})"
                      for w in host)
    return (f"{run_dir} was trained with env.wrappers that change observations or actions outside the policy cell: "
            f"{named}; the exported graph does not hold them, so a board would act on other inputs unless it repeats "
            f"them. Move the transform into the cell (docs/environments.md#wrappers-and-the-board), or export with "
            f"--allow-host-wrappers: the manifest then lists them as host_preprocessing")


@functools.lru_cache(maxsize=1)
def _distributions() -> Dict[str, List[str]]:
    """Top-level module -> installed distributions, read once per process (it scans every
    installed package; a population's members would each pay it again)."""
    return importlib.metadata.packages_distributions()


def _module_record(name: str) -> Optional[Dict[str, str]]:
    """An imported module's installed distribution and version, or its file and sha256."""
    top = name.split(".")[0]
    dists = _distributions().get(top, [])
    if dists:
        try:
            return {"package": dists[0], "version": importlib.metadata.version(dists[0])}
        except importlib.metadata.PackageNotFoundError:
            pass
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if not path:
        return None
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    return {"file": path, "sha256": digest}


def modules(env_cfg: EnvConfig) -> List[str]:
    """The modules the environment is made from: env.packages, env.id's module, the wrappers'."""
    names = list(env_cfg.packages)
    for value in [env_cfg.id] + [w.entry for w in env_cfg.wrappers]:
        if not value.startswith(IN_PROCESS) and ":" in value:
            names.append(split_entry(value, "env")[0])
    return list(dict.fromkeys(names))


def recipe(env_cfg: EnvConfig) -> Dict[str, Any]:
    """The run's environment recipe (the module docstring); the environment's modules are imported."""
    entry = env_cfg.id
    registered = gym.registry.get(env_cfg.id.split(":", 1)[-1])
    if registered is not None and not env_cfg.id.startswith(IN_PROCESS):
        ep = registered.entry_point
        entry = ep if isinstance(ep, str) else f"{getattr(ep, '__module__', '?')}:{getattr(ep, '__qualname__', ep)}"
    return {
        "id": env_cfg.id, "entry_point": entry, "kwargs": dict(env_cfg.kwargs), "wrappers": wrappers(env_cfg),
        "modules": {name: _module_record(name) for name in modules(env_cfg)},
        "gymnasium": gym.__version__,
        "rebuildable": not env_cfg.id.startswith(IN_PROCESS),
    }
