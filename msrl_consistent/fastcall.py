"""The fast call path of every hot graph call (acting, value bootstrap, updates, evaluation).

``nn.Cell.__call__`` re-derives the argument key and walks the whole sub-cell tree on every
call, which for the agents here costs more than a small acting graph's own run time
(docs/benchmarks.md, "Update and acting cost"). :class:`FastCall` sends the first call with a given
input signature (shapes, dtypes) through ``__call__``, which compiles, and later calls with
that signature straight to the compiled graph through MindSpore's graph executor.

This module is the only user of that private executor API. It was written against
MindSpore 2.10 (``SUPPORTED``); on another version, or if the internals are missing, every
call goes through ``Cell.__call__`` (the same results, slower) and one warning says so.
``ACTIVE`` tells which path is in use.
"""
from __future__ import annotations

import ctypes
import warnings
from typing import Dict, Optional

import mindspore as ms
from mindspore import nn

SUPPORTED = ("2.10.",)
"""MindSpore versions whose executor internals FastCall was checked against (prefixes)."""


def _load_executor():
    if not ms.__version__.startswith(SUPPORTED):
        return None, (f"MindSpore {ms.__version__} is not one msrl's fast call path was written for "
                      f"({', '.join(v + '*' for v in SUPPORTED)})")
    try:
        from mindspore.graph.api import _cell_graph_executor, _convert_python_data
        return (_cell_graph_executor._graph_executor, _convert_python_data), None
    except (ImportError, AttributeError) as exc:  # pragma: no cover - a changed 2.10 build
        return None, f"MindSpore's graph executor internals are not available ({exc})"


_EXECUTOR, _REASON = _load_executor()
ACTIVE: bool = _EXECUTOR is not None
"""True when graph calls skip ``Cell.__call__``'s bookkeeping."""
_warned = False


def _warn_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"msrl: {_REASON}; graph calls use nn.Cell.__call__ (same results, slower)",
                      RuntimeWarning, stacklevel=3)


def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _malloc_trim()


def trim_heap() -> None:
    """glibc's ``malloc_trim(0)``: return the heap's free pages to the system (no-op elsewhere).
    A graph compilation frees a few hundred MiB that glibc would otherwise keep resident."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class FastCall:
    """Call a GRAPH_MODE cell without ``nn.Cell.__call__``'s per-call bookkeeping.

    Only Tensor arguments are supported. In PYNATIVE_MODE, or without the executor, every
    call is ``cell(*args)``."""

    def __init__(self, cell: nn.Cell):
        self.cell = cell
        self._phases: Dict[tuple, str] = {}

    def __call__(self, *args):
        key = tuple((tuple(a.shape), a.dtype) for a in args)
        phase: Optional[str] = self._phases.get(key)
        if phase is None:
            graph = ms.get_context("mode") == ms.GRAPH_MODE
            if graph:
                # compile, hand the compiler's freed heap back to the system, then run: the run's
                # workspace then does not stack on top of the compilation's garbage (the peak RSS)
                self.cell.compile(*args)
                trim_heap()
            out = self.cell(*args)
            if graph:
                if _EXECUTOR is None:
                    _warn_once()
                else:
                    self._phases[key] = self.cell.current_phase
            return out
        run, convert = _EXECUTOR
        return convert(run(args, phase))
