"""The `lab` application: one-line errors for user mistakes, exit codes, shared helpers.

Every command module in this package registers itself on `app`. Exit codes:

    0    done
    1    writing the output failed (a full disk, ...): one line, nothing partial left
    2    a mistake in the input: one `Error:` line saying what is allowed, nothing written
    3    `lab run`: the run diverged (records up to that step written, summary.json "status": "diverged");
         `lab sweep`: every run diverged
    130  interrupted (Ctrl-C; 143 for SIGTERM): one line, nothing partial left
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import typer
from typer.core import TyperGroup

from lab.training.config import ConfigError, TrainConfig
from lab.cli.progress import run_with_progress  # noqa: F401  (re-exported for the commands)
from lab.files.output_folders import OutputError

DEFAULTS = TrainConfig()
EXIT_WRITE_FAILED, EXIT_USER_ERROR = 1, 2
USER_ERRORS = (ConfigError, ValueError, FileExistsError)
"""Exceptions that mean the user asked for something impossible (not a bug): one line, exit 2."""


class UserError(typer.TyperException):
    """A mistake in the command line; reported as one line, exit code 2."""

    exit_code = 2


class WriteFailed(typer.TyperException):
    """The machine refused to store the output (full disk, ...); reported as one line, exit code 1."""

    exit_code = EXIT_WRITE_FAILED


class Interrupted(Exception):
    """Ctrl-C or SIGTERM inside a command, carried past click (which would print its own lines)."""

    def __init__(self, interrupt: KeyboardInterrupt) -> None:
        self.interrupt = interrupt


def interrupted(e: KeyboardInterrupt) -> int:
    """Print the one line for Ctrl-C or SIGTERM (`lab.cli.main.Terminated`) and return the exit code."""
    from lab.cli.main import interrupted as report  # one place: later signals ignored, then the line

    return report(e)


class OneLineErrors(TyperGroup):
    """Report usage mistakes (bad choices, bad numbers) as a single `Error:` line, exit code 2."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt as e:  # while click parses `lab`'s own options: no blank line from click
            raise Interrupted(e) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as e:  # temporary outputs are already removed by their context managers
            raise Interrupted(e) from None

    def main(self, *args, **kwargs):
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except Interrupted as e:
            sys.exit(interrupted(e.interrupt))
        except KeyboardInterrupt as e:  # while click parses the command line
            sys.exit(interrupted(e))
        except typer.TyperException as e:  # typer's (vendored click's) usage errors and ours
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `lab`: the help, as usual
                typer.echo(e.format_message())
                sys.exit(0)
            typer.echo(f"Error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except typer.Abort as e:
            if isinstance(e.__context__, KeyboardInterrupt):  # Ctrl-C while click parsed the line
                sys.exit(interrupted(e.__context__))
            typer.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=OneLineErrors, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="GRPO sorting lab: train, sweep and prove policy-gradient mechanics on a toy task.")


@app.callback()
def lab() -> None:
    """GRPO sorting lab: train, sweep and prove policy-gradient mechanics on a toy task."""
    from lab.cli.main import held_import

    held_import("torch").set_num_threads(1)  # tiny tensors: one thread beats the threading overhead


HEAVY_LIBRARIES = {"figures": ("matplotlib.figure", "matplotlib.backends.backend_agg"),
                   "tables": ("pyarrow", "pyarrow.parquet", "pyarrow.csv")}
"""The C-extension libraries a command loads late, each loaded whole before use (`load`)."""


def load(kind: str) -> None:
    """Import the `HEAVY_LIBRARIES` of `kind` with SIGINT and SIGTERM held back until each is whole, so Ctrl-C
    there is the usual one line and exit 130, not a traceback from a half-initialised extension."""
    from lab.cli.main import held_import

    for name in HEAVY_LIBRARIES[kind]:
        held_import(name)


def fail(message: str) -> None:
    """Stop with a user-facing one-line error."""
    raise UserError(message)


@contextmanager
def writing(out: Path):
    """Report an OS failure while writing `out` (ENOSPC, EIO, ...) as one line, exit code 1.

    The output is built under a temporary name and removed on failure (`lab.files.output_folders`), so the
    line can promise that nothing was left.
    """
    try:
        yield
    except OutputError as e:  # the folder changed hands while we trained: the usual one line, exit 2
        raise UserError(str(e)) from None
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise WriteFailed(f"could not write {out}: {reason}; nothing was written") from None
