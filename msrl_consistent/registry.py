"""The algorithm registry: name -> algorithm class (which carries its config class and agent).

The core never imports ``msrl_consistent.algorithms``. Algorithms are found through the
``msrl_consistent.algorithms`` entry-point group (declared in pyproject.toml; a third-party
package adds its own algorithm the same way) and are imported only when first asked for by
name. An algorithm module may also call :func:`register` itself; either way this module is
the one place that maps names to classes.

An algorithm class provides ``name``, ``config_cls`` (the dataclass of its ``algo:`` config
section) and ``agent_cls`` (``agent_cls(cfg, spec, rng)`` builds every network of it; its
``policy_cell()`` is the export target).
"""
from __future__ import annotations

import difflib
from importlib import metadata
from typing import Dict, List

GROUP = "msrl_consistent.algorithms"

_classes: Dict[str, type] = {}


class UnknownAlgorithm(KeyError):
    """No algorithm of that name is registered."""


def register(cls: type) -> type:
    """Class decorator: make ``cls`` known under ``cls.name``."""
    if not getattr(cls, "name", ""):
        raise ValueError(f"{cls.__name__} has no algorithm name")
    _classes[cls.name] = cls
    return cls


def _entry_points() -> Dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=GROUP)}


def names() -> List[str]:
    """Every registered algorithm name (entry points and explicit registrations), sorted."""
    return sorted(set(_entry_points()) | set(_classes))


def get(name: str) -> type:
    """The algorithm class registered as ``name``; imports its module on first use."""
    if name not in _classes:
        ep = _entry_points().get(name)
        if ep is None:
            close = difflib.get_close_matches(name, names(), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise UnknownAlgorithm(f"unknown algorithm {name!r}; expected one of {', '.join(names())}{hint}")
        _classes.setdefault(name, ep.load())
    return _classes[name]


def config_class(name: str) -> type:
    """The dataclass of the ``algo:`` section of algorithm ``name``."""
    return get(name).config_cls


def build_agent(cfg, spec, rng):
    """Every network of ``cfg.algorithm``, initialized from ``rng`` (the agent's ``policy_cell()``
    is what acts and what is exported)."""
    return get(cfg.algorithm).agent_cls(cfg, spec, rng)
