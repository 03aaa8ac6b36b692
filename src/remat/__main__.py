"""`python -m remat` and the `remat` console script (``run``; rules under `--sdm conda` use the former)."""

import sys

from remat.interrupt import exit_on_interrupt


def run() -> int:
    """remat.cli.main, with Ctrl-C and SIGTERM handled from before the CLI's imports (remat.interrupt)."""
    with exit_on_interrupt():
        from remat.cli import main  # imports torch and the rest: only once the handlers are in place
        return main()


if __name__ == "__main__":
    sys.exit(run())
