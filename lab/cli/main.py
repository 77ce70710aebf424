"""The `lab` console entry point: signals first, then the command modules, then the app.

From `main`'s first instruction on, Ctrl-C is one line "Interrupted" and exit 130, SIGTERM "Interrupted
(SIGTERM)" and exit 143 (`lab.cli.signals`): while the command line is parsed, while the command modules,
torch or matplotlib load (held back until they are whole), while the command runs and while it writes.
Once the output is in place a late signal has nothing left to stop and is ignored.

Importing this module loads nothing heavy (`lab/__init__.py` and `lab/cli/__init__.py` load their
names on first use), and neither do the command modules: torch loads as a command's first instruction
(`lab.cli.application.load_torch`), so `lab --help`, `lab --version` and `lab CMD --help` never load it. Before `main`'s first instruction (Python's own start-up, some tens of
milliseconds) the system's defaults apply: the process ends at once, having written nothing.
"""

from __future__ import annotations

import signal
import sys

from lab.cli.signals import ENTRY, ignore_signals, interrupted, raise_terminated
from lab.files.temporaries import signals_held


def main() -> None:
    signal.signal(signal.SIGTERM, raise_terminated)
    ENTRY["running"] = True
    try:
        with signals_held():  # the command modules load whole, or the signal waits for them
            from lab.cli.commands import app
        app()  # the app reports interrupts inside commands itself; here: while typer builds the command
    except KeyboardInterrupt as e:
        sys.exit(interrupted(e))
    except SystemExit:  # the command is done and its output in place: a signal now has nothing to stop
        ignore_signals()
        raise
