"""What a directory is to msrl: a run directory, an export directory, or neither.

A run directory holds ``config.yaml`` (written by ``msrl train`` before anything trains); an export
directory holds ``manifest.json`` (written last by ``msrl export``). Every command that takes a
directory decides what it is here, with :func:`kind`, and refuses the wrong one with
:func:`expect`, whose one-line ConfigError (exit 2) names the path, what it is and what was
expected. A population directory (``msrl train --seeds``) is refused where one run directory is
expected, naming its members.
"""
from __future__ import annotations

import os

from .config import ConfigError
from .deploy.names import MANIFEST

RUN = "run"
EXPORT = "export"
NEITHER = "neither"
CONFIG = "config.yaml"
MARKERS = {RUN: CONFIG, EXPORT: MANIFEST}
"""The file that makes a directory of each kind."""


def kind(path: str) -> str:
    """``export`` (it has manifest.json, even a broken link: the reader then says what is wrong
    with it), ``run`` (it has config.yaml) or ``neither`` (also: no such directory)."""
    if not os.path.isdir(path):
        return NEITHER
    if os.path.lexists(os.path.join(path, MANIFEST)):
        return EXPORT
    if os.path.isfile(os.path.join(path, CONFIG)):
        return RUN
    return NEITHER


def _named(k: str) -> str:
    return f"a{'n' if k == EXPORT else ''} {k} directory"


def expect(path: str, *kinds: str) -> str:
    """The kind of ``path`` when it is one of ``kinds`` (run, export); else a one-line ConfigError
    naming the path, what it is and what was expected."""
    if not os.path.isdir(path):
        raise ConfigError(f"no such {' or '.join(kinds)} directory: {path}")
    found = kind(path)
    if found in kinds:
        return found
    if RUN in kinds:
        from .populations import not_a_member
        not_a_member(path)
    if found == NEITHER:
        missing = " nor ".join(f"{_named(k)} (no {MARKERS[k]})" for k in kinds)
        raise ConfigError(f"{path} is {'neither ' if len(kinds) > 1 else 'not '}{missing}")
    hint = f"; export it first with `msrl export {path} --out DIR`" if found == RUN else ""
    raise ConfigError(f"{path} is {_named(found)}, not {' or '.join(_named(k) for k in kinds)} "
                      f"(no {' or '.join(MARKERS[k] for k in kinds)}){hint}")
