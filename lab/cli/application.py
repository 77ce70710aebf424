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

import re
import sys
import typing
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from lab.training.config import ConfigError, TrainConfig
from lab.cli.progress import run_with_progress
from lab.cli.signals import held_import
from lab.cli.signals import interrupted as report_interrupt  # noqa: F401  (re-exported for the commands)
from lab.files.output_folders import OutputError, RunFolder
from lab.files.writable import check_writable

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
    """Print the one line for Ctrl-C or SIGTERM (`lab.cli.signals.Terminated`) and return the exit code."""
    return report_interrupt(e)


def choices_of(param) -> type[Enum] | None:
    """The enum a parameter's values are chosen from (`--delta`, repeatable or optional too), or None."""
    runtime = getattr(param, "get_runtime_param", None)
    kinds = [getattr(runtime(), "annotation", None)] if callable(runtime) else []
    while kinds:
        kind = kinds.pop()
        if isinstance(kind, type) and issubclass(kind, Enum):
            return kind
        kinds.extend(typing.get_args(kind))
    return None


def choice_message(e: Exception) -> str | None:
    """A bad choice as the lab's other errors read (`--delta centred is not a choice; choose one of: raw, ...`),
    not typer's "Invalid value for '--delta': Value error, 'centred' is not one of ..."; None for other errors."""
    param, text = getattr(e, "param", None), e.format_message() if hasattr(e, "format_message") else str(e)
    kind = choices_of(param)
    given = re.search(r"'((?:[^'\\]|\\.)*)' is not (?:one of|a valid)", text)
    if kind is None or given is None:
        return None
    return (f"{param.opts[0]} {given.group(1)} is not a choice; choose one of: "
            f"{', '.join(member.value for member in kind)}")


OTHER_NAMES = {"--gpu": "--device cuda", "--cuda": "--device cuda", "--cpu": "--device cpu",
               "--precision": "--dtype float64", "--double": "--dtype float64", "--float64": "--dtype float64"}
"""Options other tools have, by what the lab calls them (click's own suggestions go by spelling alone: --gpu -> --out)."""


def other_name_message(e: Exception) -> str | None:
    """`No such option: --gpu; the lab says --device cuda (--device auto|cpu|cuda)` where the typed option is another
    tool's name for one of the lab's; None otherwise."""
    name = getattr(e, "option_name", None)
    if type(e).__name__ != "NoSuchOption" or name not in OTHER_NAMES:
        return None
    ours = OTHER_NAMES[name]
    choices = {"--device": "auto|cpu|cuda", "--dtype": "float32|float64"}[ours.split()[0]]
    return f"No such option: {name}; the lab says {ours} ({ours.split()[0]} {choices})"


class OneLineErrors(TyperGroup):
    """Report usage mistakes (bad choices, bad numbers) as a single `Error:` line, exit code 2."""

    def format_commands(self, ctx, formatter) -> None:
        """Each command with its whole first line (click cuts it to the terminal's width with "...")."""
        rows = [(name, command.get_short_help_str(limit=10_000)) for name in self.list_commands(ctx)
                if (command := self.get_command(ctx, name)) is not None and not command.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

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
            message = choice_message(e) or other_name_message(e) or e.format_message()  # one mismatch a line
            typer.echo("\n".join(f"Error: {line}" for line in message.splitlines() or [""]), err=True)
            sys.exit(e.exit_code)
        except typer.Abort as e:
            if isinstance(e.__context__, KeyboardInterrupt):  # Ctrl-C while click parsed the line
                sys.exit(interrupted(e.__context__))
            typer.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=OneLineErrors, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="GRPO sorting lab: train, sweep and prove policy-gradient mechanics on a toy task.\n\n"
                       "\b\nExit codes: 0 done; 1 writing failed (nothing written); 2 a mistake in the input\n"
                       "(one line, nothing written); 3 the run diverged (every run, for lab sweep);\n"
                       "130 interrupted by Ctrl-C, 143 by SIGTERM (one line, nothing partial left).")


def show_version(asked: bool) -> None:
    """`lab --version`: the installed package's version, then exit 0 (before any command or torch loads)."""
    if asked:
        from importlib.metadata import version

        typer.echo(f"lab (grpo-sorting-lab) {version('grpo-sorting-lab')}")
        raise typer.Exit(0)


@app.callback()
def lab(version: Annotated[bool, typer.Option("--version", is_eager=True, callback=show_version,
                                              help="print the lab's version and exit")] = False) -> None:
    """GRPO sorting lab: train, sweep and prove policy-gradient mechanics on a toy task."""


HEAVY_LIBRARIES = {"figures": ("matplotlib.figure", "matplotlib.backends.backend_agg"),
                   "tables": ("pyarrow", "pyarrow.parquet", "pyarrow.csv"),
                   "trl": ("transformers", "datasets", "trl")}
"""The C-extension libraries a command loads late, each loaded whole before use (`load`)."""


def load_torch():
    """torch, loaded whole as `load` does, and set to one CPU thread (tiny tensors: one thread beats the threading
    overhead; `lab sweep --threads` and `lab bench` set their own after). A command's first instruction, so that
    `lab --help` and `lab CMD --help` never load it (tests/cli/test_help_imports.py)."""
    torch = held_import("torch")
    torch.set_num_threads(1)
    return torch


def load(kind: str) -> None:
    """Import the `HEAVY_LIBRARIES` of `kind` with SIGINT and SIGTERM held back until each is whole, so Ctrl-C
    there is the usual one line and exit 130, not a traceback from a half-initialised extension."""
    for name in HEAVY_LIBRARIES[kind]:
        held_import(name)


def output_folder(out: Path, force: bool, command: str) -> RunFolder:
    """A command's output folder, checked before any work: a name the file system takes first (a name too long
    fails any other look at it), then a folder the command may write (free, or its own with --force)."""
    folder = RunFolder(out, force, command=command)
    check_writable(folder.out)
    folder.check()
    return folder


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
