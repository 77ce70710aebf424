"""Ctrl-C and SIGTERM in the `lab` command: one line, exit 130 or 143, and heavy imports that are never cut.

    SIGTERM  -> raised as `Terminated` (a KeyboardInterrupt) where the program is, so every temporary
                output is removed exactly as for Ctrl-C; exit 143, "Interrupted (SIGTERM)"
    Ctrl-C   -> exit 130, "Interrupted"
    a second signal while the first is being reported is ignored (the process is already leaving)

Heavy modules are imported with the signals held back (`held_import`, `lab.files.temporaries.signals_held`):
a signal that lands inside a C extension's initialisation would otherwise surface as an ImportError, an
AttributeError (a half-made numpy), or a C++ abort instead of an interrupt. It is delivered the moment
the import is whole.
"""

from __future__ import annotations

import importlib
import signal
import sys

from lab.files.temporaries import signals_held

EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143
ENTRY = {"running": False}
"""Whether `lab.cli.main.main` runs this process (then later signals are ignored once one is reported; not in
a test's process)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered as an exception so that `finally` blocks and context managers run."""


def raise_terminated(signum, frame) -> None:
    raise Terminated()


def ignore_signals() -> None:
    """From now on SIGINT and SIGTERM do nothing: the process is leaving, its output whole or removed."""
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)


def interrupted(e: KeyboardInterrupt) -> int:
    """Print the one line for Ctrl-C or SIGTERM and return its exit code (130 or 143); later signals are
    ignored, so a second Ctrl-C cannot cut the line or the exit short with a traceback."""
    if ENTRY["running"]:
        ignore_signals()
    terminated = isinstance(e, Terminated)
    print("Interrupted" + (" (SIGTERM)" if terminated else ""), file=sys.stderr, flush=True)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


def held_import(name: str):
    """`importlib.import_module(name)` with SIGINT and SIGTERM held back until the module is whole."""
    with signals_held():
        return importlib.import_module(name)
