"""Ctrl-C (SIGINT) that survives MindSpore.

MindSpore 2.10 installs its own SIGINT handler on every graph call, and that handler re-raises
the signal as SIGTERM, so a Python SIGINT handler is replaced as soon as a graph runs
(measured: a handler installed after a call is gone after the next cached call). The CLI
therefore blocks SIGINT in every thread, before MindSpore starts its threads, and receives it
synchronously in a watcher thread (``sigwait``): during training it asks the loop to stop
(checkpoint, exit 130); otherwise it raises KeyboardInterrupt in the main thread.

:class:`StopOnSignals` is the one place training handles signals: SIGINT/SIGTERM call the loop's
``request_stop(signum)`` for its duration, and the previous handlers come back afterwards.
"""
from __future__ import annotations

import signal
import threading
from typing import Callable, Optional

_state = {"watching": False, "callback": None}


def watch_sigint() -> bool:
    """Block SIGINT process-wide (threads created later inherit the mask) and start the watcher."""
    if _state["watching"] or threading.current_thread() is not threading.main_thread():
        return _state["watching"]
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    threading.Thread(target=_wait, name="msrl-sigint", daemon=True).start()
    _state["watching"] = True
    return True


def watching() -> bool:
    return _state["watching"]


def on_sigint(callback: Optional[Callable[[int], None]]) -> None:
    """While set, SIGINT calls ``callback(signum)`` instead of interrupting the main thread."""
    _state["callback"] = callback


def _wait() -> None:
    import _thread
    while True:
        sig = signal.sigwait({signal.SIGINT})
        cb = _state["callback"]
        if cb is not None:
            cb(sig)
        else:
            _thread.interrupt_main()


class StopOnSignals:
    """Context manager of a training loop: SIGINT and SIGTERM call ``request_stop(signum)``.

    Through the watcher thread where the CLI started it; in the main thread also as Python
    handlers (library use). MindSpore replaces the SIGINT handler on every graph call, so the
    loop calls :meth:`reinstall` after each iteration; without the watcher, a SIGINT that
    arrives during graph calls ends as MindSpore's SIGTERM (exit 143). On exit the previous
    handlers are restored."""

    def __init__(self, request_stop: Callable[[int], None]):
        self.request_stop = request_stop
        self._saved = {}
        self._main = False

    def _handler(self, signum, frame) -> None:
        self.request_stop(signum)

    def reinstall(self) -> None:
        if watching():
            on_sigint(self.request_stop)
        if self._main:
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, self._handler)

    def __enter__(self) -> "StopOnSignals":
        self._main = threading.current_thread() is threading.main_thread()
        if self._main:
            self._saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        self.reinstall()
        return self

    def __exit__(self, *exc) -> None:
        on_sigint(None)
        for sig, h in self._saved.items():
            signal.signal(sig, h)
