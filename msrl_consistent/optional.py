"""Optional packages: one exception for "not installed", with the command that installs it.

``msrl`` reports :class:`MissingOptionalPackage` as ``msrl: error: ...`` with exit 2 (never a
traceback); library callers get the same message in the exception.
"""
from __future__ import annotations

import importlib

ONNX_INSTALL = 'pip install onnx onnxruntime   (or: pip install "msrl-consistent[onnx]")'
"""onnx and onnxruntime are dependencies of the package; this is for an installation made without them."""
PLOT_INSTALL = 'pip install matplotlib   (or: pip install "msrl-consistent[plot]")'
ATARI_INSTALL = 'pip install ale-py==0.12.1   (or: pip install "msrl-consistent[atari]")'


class MissingOptionalPackage(RuntimeError):
    """A package needed by the requested feature is not installed (the message says how to install it)."""


def require(module: str, purpose: str, install: str):
    """Import and return ``module``, or raise MissingOptionalPackage saying ``purpose`` needs it
    and how to ``install`` it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingOptionalPackage(f"{purpose} needs the {module} package, which is not installed "
                                     f"({exc}); install it with: {install}") from None
