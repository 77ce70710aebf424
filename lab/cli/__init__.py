"""`lab`: the command line. Commands only build a task and configs, call the library, and save.

    lab run --delta centered --loss clipped      one run -> runs/<settings>-seed<k>/
    lab sweep --delta raw --delta centered --seeds 20
    lab diagnose                                 exact gradient bias and variance per delta mode
    lab reproduce                                figures/ and figures/RESULTS.md from scratch
    lab bench                                    speed against the lecture-style loop

Mistakes in the input end with exit code 2 and one line on stderr that says
what is allowed; nothing is left half-written.
"""

import torch

from lab.cli.app import app

# importing a command module registers its command; `lab --help` lists them in this order
# isort: off
from lab.cli import run_command, sweep_command, diagnose_command, reproduce_command  # noqa: E402, F401
# isort: on


def main() -> None:
    """The former console entry point: `lab_console.main` (signal handling), or the app alone in an
    environment installed before `lab_console` existed (`pip install -e .` adds it)."""
    try:
        from lab_console import main as console_main
    except ImportError:
        torch.set_num_threads(1)  # tiny tensors: one thread beats the threading overhead
        app()
        return
    console_main()


__all__ = ["app", "main"]
