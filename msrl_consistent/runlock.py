"""One training process per run directory, held with an OS file lock.

Two processes training the same run directory (a scheduler restarting a job whose old process is
still alive) would both write checkpoints, append to metrics.jsonl and share the TensorBoard
directory. :func:`hold` takes an exclusive ``flock`` on ``RUN_DIR/.msrl-train.lock`` for as long as
training runs: the kernel drops it when the holder exits, however it exits (a SIGKILLed holder
leaves nothing to clean up, and ``msrl train --resume`` then just works). The file records the
holder's PID, host and start time, so the refused process can say who holds the directory; the
record is information only, the lock is the flock.

Data-parallel runs: the launcher holds the lock and starts its msrun workers with
``MSRL_RUN_LOCK_HELD`` naming the directory; a worker of that directory does not lock again.
On several hosts sharing the directory, node 0's launcher holds this lock and each other node's
launcher a lock file of its own (cluster.py).
Re-entrant within a process (the CLI locks before it writes config.yaml, ``Algorithm.learn`` locks
again). On a platform without ``fcntl`` (Windows) no lock is taken.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from typing import Dict, Iterator

from .config import ConfigError

LOCK_FILE = ".msrl-train.lock"
HELD_ENV = "MSRL_RUN_LOCK_HELD"
"""Set by a data-parallel launcher to the run directory whose lock it holds for its workers."""

_HELD: Dict[str, int] = {}  # run directory (realpath) -> file descriptor, in this process


class RunDirBusy(ConfigError):
    """Another live process is training this run directory (exit 2)."""


def _key(run_dir: str) -> str:
    return os.path.realpath(run_dir)


def _holder(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            info = json.loads(fh.read() or "{}")
        return (f"PID {info.get('pid', '?')} on host {info.get('host', '?')} "
                f"(since {info.get('started', '?')})")
    except (OSError, ValueError):
        return "another process"


@contextlib.contextmanager
def hold(run_dir: str, lock_file: str = LOCK_FILE) -> Iterator[None]:
    """Hold ``run_dir``'s training lock for the ``with`` block; raises RunDirBusy, naming the
    holder's PID and host, when a live process holds it. ``lock_file``: the lock's name (a
    launcher of another node than node 0 holds one of its own, cluster.Cluster.lock_file)."""
    key = _key(run_dir)
    if key in _HELD or os.environ.get(HELD_ENV) == key:
        yield
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover  (Windows)
        yield
        return
    path = os.path.join(run_dir, lock_file)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise RunDirBusy(f"run directory {run_dir} is being trained by {_holder(path)}; wait for that process "
                         f"to end (or stop it), then resume with: msrl train --resume {run_dir}") from None
    try:
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, record.encode("utf-8"), 0)
        _HELD[key] = fd
        yield
    finally:
        _HELD.pop(key, None)
        os.close(fd)  # closing the descriptor releases the flock


def held_env(run_dir: str, environ: Dict[str, str]) -> Dict[str, str]:
    """``environ`` for the workers of a data-parallel launcher that holds ``run_dir``'s lock."""
    return dict(environ, **{HELD_ENV: _key(run_dir)})


@contextlib.contextmanager
def new_run_dir(run_dir: str):
    """Create ``run_dir`` (it must be new or empty) and hold its lock for the block."""
    if os.path.isdir(run_dir) and os.listdir(run_dir):
        raise ConfigError(f"run directory {run_dir} already exists and is not empty; choose another run directory")
    os.makedirs(run_dir, exist_ok=True)
    with hold(run_dir):
        if set(os.listdir(run_dir)) - {LOCK_FILE}:
            raise ConfigError(f"run directory {run_dir} already exists and is not empty; choose another run "
                              f"directory")
        yield
