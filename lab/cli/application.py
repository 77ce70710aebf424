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
    terminated = type(e).__name__ == "Terminated"  # by name: lab.cli.main imports this module, not the reverse
    typer.echo("Interrupted" + (" (SIGTERM)" if terminated else ""), err=True)
    return 143 if terminated else 130


class OneLineErrors(TyperGroup):
    """Report usage mistakes (bad choices, bad numbers) as a single `Error:` line, exit code 2."""

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
