"""The `msrl` console script. SIGINT is routed to a watcher thread before anything else is
imported (NumPy's and MindSpore's threads inherit the blocked mask; see signals.py)."""
import sys

from .signals import watch_sigint


def main() -> int:
    watch_sigint()
    from .cli import main as cli_main
    return cli_main(sys.argv[1:])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
