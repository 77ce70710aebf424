"""`lab`: the command line. Commands only build a task and configs, call the library, and save.

    lab.cli.main         the console entry point (`lab`, `python -m lab`): signals, then the app
    lab.cli.signals      Ctrl-C and SIGTERM: one line, exit 130 or 143; heavy imports held whole
    lab.cli.commands     the Typer `app` with every command registered
    lab.cli.application  the app object, one-line errors and exit codes shared by the commands
    lab.cli.options      the options the commands share

Mistakes in the input end with exit code 2 and one line on stderr that says what is allowed;
nothing is left half-written. `from lab.cli import app` gives the app; it is loaded on first use,
so that importing `lab.cli.main` stays free of torch until its signal handlers are in place.
"""

from __future__ import annotations

import importlib

PUBLIC = {"app": "lab.cli.commands", "main": "lab.cli.main"}


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module 'lab.cli' has no attribute {name!r}")
    return getattr(importlib.import_module(PUBLIC[name]), name)
