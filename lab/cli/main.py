"""The `lab` console entry point: signals first, then the heavy imports, then the app.

    SIGTERM  -> raised as `Terminated` (a KeyboardInterrupt) where the program is, so every
                temporary output is removed exactly as for Ctrl-C; exit 143, one line
    Ctrl-C   -> exit 130, one line ("Interrupted"), also while torch is still loading

Importing this module loads nothing heavy (`lab/__init__.py` and `lab/cli/__init__.py` load their
names on first use), so an interrupt during start-up lands inside `main`'s handler instead of
printing an import traceback.
"""

from __future__ import annotations

import signal
import sys

EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered as an exception so that `finally` blocks and context managers run."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def interrupted(e: KeyboardInterrupt) -> int:
    """Print the one line for Ctrl-C or SIGTERM and return its exit code (130 or 143)."""
    terminated = isinstance(e, Terminated)
    print("Interrupted" + (" (SIGTERM)" if terminated else ""), file=sys.stderr, flush=True)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


def main() -> None:
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        import torch

        from lab.cli.commands import app

        torch.set_num_threads(1)  # tiny tensors: one thread beats the threading overhead
    except KeyboardInterrupt as e:
        sys.exit(interrupted(e))
    app()
