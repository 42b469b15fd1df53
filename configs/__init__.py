"""The tuned configs shipped with the package (``<algorithm>/<env id>.yaml``), found by name."""
from __future__ import annotations

import difflib
import os
from typing import Dict

SHIPPED_PACKAGE = "msrl_consistent.configs"
"""The tuned configs ship as package data: ``<algorithm>/<env id>.yaml`` in this package."""


def shipped_configs() -> Dict[str, str]:
    """The shipped configs: name (``ppo/CartPole-v1``) -> file path, sorted by name."""
    from importlib import resources

    root = resources.files(SHIPPED_PACKAGE)
    out = {}
    for algo in sorted(root.iterdir(), key=lambda p: p.name):
        if not algo.is_dir():
            continue
        for f in sorted(algo.iterdir(), key=lambda p: p.name):
            if f.name.endswith(".yaml"):
                out[f"{algo.name}/{f.name[:-len('.yaml')]}"] = str(f)
    return out


def resolve_config(name_or_path: str) -> str:
    """A config file path: ``name_or_path`` itself when it exists, else the shipped config of
    that name (``ppo/CartPole-v1``; a ``configs/`` prefix and a ``.yaml`` suffix are accepted,
    so the README's ``configs/ppo/CartPole-v1.yaml`` works outside the source tree too)."""
    if os.path.exists(name_or_path):
        return name_or_path
    name = name_or_path.replace(os.sep, "/")
    name = name[len("configs/"):] if name.startswith("configs/") else name
    name = name[:-len(".yaml")] if name.endswith(".yaml") else name
    shipped = shipped_configs()
    if name in shipped:
        return shipped[name]
    close = difflib.get_close_matches(name, list(shipped), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    from msrl_consistent.config import ConfigError
    raise ConfigError(f"config file not found: {name_or_path}, and no shipped config has that name{hint}; "
                      f"shipped configs: {', '.join(shipped)}")


