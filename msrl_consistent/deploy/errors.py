"""The errors of reading and running an export, and the exit codes of ``check`` and ``msrl verify``."""
from __future__ import annotations


class ExportError(RuntimeError):
    """The export directory is broken, hostile or cannot be run here (exit 2, one line)."""


class BackendUnavailable(ExportError):
    """The backend's library is not installed (the message says what to install)."""


class GuardError(RuntimeError):
    """A guarded policy met a violation and had no fallback that answered correctly."""



def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}".rstrip(": ")




EXIT_PASS, EXIT_MISMATCH, EXIT_ERROR = 0, 1, 2
