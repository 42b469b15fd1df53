"""msrl-consistent: MindSpore RL whose exported policy provably acts like the trained one."""
import os as _os

__version__ = "0.1.0"

# `algorithms/` and `export/` sit at the top of the source tree and are installed as
# sub-packages of this one (setup.py's package_dir). When this package is imported from a
# checkout (the repository root on sys.path, as when running tests), map them the same way.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "setup.py")) and _os.path.isfile(_os.path.join(_root, "algorithms", "base.py")):
    if _root not in __path__:
        __path__.append(_root)
