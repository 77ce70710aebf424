"""The `lab` application: one-line errors for user mistakes, the progress bar, shared helpers.

Every command module in this package registers itself on `app`; a mistake in the
input ends with exit code 2 and one `Error:` line on stderr that says what is allowed.
"""

from __future__ import annotations

import sys

import typer
from typer.core import TyperGroup

from lab.config import ConfigError, TrainConfig

DEFAULTS = TrainConfig()
USER_ERRORS = (ConfigError, ValueError, FileExistsError)
"""Exceptions that mean the user asked for something impossible (not a bug): one line, exit 2."""


class UserError(typer.TyperException):
    """A mistake in the command line; reported as one line, exit code 2."""

    exit_code = 2


class OneLineErrors(TyperGroup):
    """Report usage mistakes (bad choices, bad numbers) as a single `Error:` line, exit code 2."""

    def main(self, *args, **kwargs):
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except typer.TyperException as e:  # typer's (vendored click's) usage errors and ours
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `lab`: the help, as usual
                typer.echo(e.format_message())
                sys.exit(0)
            typer.echo(f"Error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except typer.Abort:
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


def run_with_progress(quiet: bool, label: str, total: int, fn):
    """Call fn(progress) with a callback that drives a progress bar on stderr (none when quiet)."""
    if quiet or not sys.stderr.isatty():  # a bar only where someone watches it
        return fn(None)
    with typer.progressbar(length=total, label=label, file=sys.stderr, show_eta=True) as bar:
        return fn(lambda done, _total: bar.update(done - bar.pos))
