"""The `lab` console entry point: signals first, then the heavy imports, then the app.

    SIGTERM  -> raised as `Terminated` (a KeyboardInterrupt) where the program is, so every
                temporary output is removed exactly as for Ctrl-C; exit 143, "Interrupted (SIGTERM)"
    Ctrl-C   -> exit 130, "Interrupted"; from main's first instruction on: while the command line is
                parsed, while torch or matplotlib load, while the command runs and while it writes
    a second signal while the first is being reported is ignored (the process is already leaving)

Importing this module loads nothing heavy (`lab/__init__.py` and `lab/cli/__init__.py` load their
names on first use). Heavy modules are imported with the signals held back (`held_import`): a
signal that lands inside a C extension's initialisation would otherwise surface as an ImportError,
an AttributeError (a half-made numpy), or a C++ abort instead of an interrupt. It is delivered the
moment the import is whole. Before main's first instruction (Python's own start-up, some tens of
milliseconds) the system's defaults apply: the process ends at once, having written nothing.
"""

from __future__ import annotations

import importlib
import signal
import sys

EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143
ENTRY = {"running": False}
"""Whether `main` runs this process (then later signals are ignored once one is reported; not in a test's)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered as an exception so that `finally` blocks and context managers run."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def interrupted(e: KeyboardInterrupt) -> int:
    """Print the one line for Ctrl-C or SIGTERM and return its exit code (130 or 143); later signals are
    ignored, so a second Ctrl-C cannot cut the line or the exit short with a traceback."""
    if ENTRY["running"]:
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN)
    terminated = isinstance(e, Terminated)
    print("Interrupted" + (" (SIGTERM)" if terminated else ""), file=sys.stderr, flush=True)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


def held_import(name: str):
    """`importlib.import_module(name)` with SIGINT and SIGTERM held back until the module is whole."""
    from lab.files.temporaries import signals_held

    with signals_held():
        return importlib.import_module(name)


def main() -> None:
    signal.signal(signal.SIGTERM, _raise_terminated)
    ENTRY["running"] = True
    try:
        app = held_import("lab.cli.commands").app
        app()  # the app reports interrupts inside commands itself; here: while typer builds the command
    except KeyboardInterrupt as e:
        sys.exit(interrupted(e))
    except SystemExit:  # the command is done and its output in place: a signal now has nothing to stop
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN)
        raise
