"""Ctrl-C (SIGINT) that survives MindSpore.

MindSpore 2.10 installs its own SIGINT handler on every graph call, and that handler re-raises
the signal as SIGTERM, so a Python SIGINT handler is replaced as soon as a graph runs
(measured: a handler installed after a call is gone after the next cached call). The CLI
therefore blocks SIGINT in every thread, before MindSpore starts its threads, and receives it
synchronously in a watcher thread (``sigwait``): during training it asks the loop to stop
(checkpoint, exit 130); otherwise it raises KeyboardInterrupt in the main thread.
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
