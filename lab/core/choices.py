"""Modes are `str` enums; a mode given by name is parsed here, once, with an error that lists the choices.

    parse_choice(DeltaMode, "centered", "delta mode")  ->  DeltaMode.centered
    parse_choice(DeltaMode, "median", "delta mode")    ->  ValueError: unknown delta mode 'median'; choose one of: ...

An axis with behaviour of its own (a delta mode, a loss) is a `Table`: a `str` enum whose every member carries its
entry (`DeltaMode.centered.entry`), the one place that says what the member does. An entry names its functions by
`Ref` ("module:function"), imported on first call, so that the table (and the command's `--help`, which lists every
member with its `help`: `described`) loads without torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import TypeVar

E = TypeVar("E", bound=Enum)


class ConfigError(ValueError):
    """A user-facing mistake in a setting; its message says what is allowed."""


def parse_choice(choices: type[E], value: E | str, what: str, error: type[Exception] = ValueError) -> E:
    """The member of `choices` named `value` (or `value` itself); else `error` naming `what` and every choice."""
    try:
        return choices(value)
    except ValueError:
        names = ", ".join(m.value for m in choices)
        raise error(f"unknown {what} {value!r}; choose one of: {names}") from None


@cache
def _resolve(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Ref:
    """A function named by its module and its name, `Ref("lab.core.losses:clipped")`: imported on its first call,
    so that a table of modes loads without the math (tests/test_architecture.py holds a table's refs to the
    layers its module may import)."""

    path: str

    def resolve(self):
        return _resolve(self.path)

    def __call__(self, *args, **kwargs):
        return _resolve(self.path)(*args, **kwargs)


class Table(str, Enum):
    """A `str` enum whose members are entries: `centered = Delta("centered", ...)`. The member's value is the entry's
    `name` (what a user types), its `entry` the entry itself."""

    def __new__(cls, entry):
        member = str.__new__(cls, entry.name)
        member._value_ = entry.name
        member.entry = entry
        return member


def described(choices: type[Table]) -> str:
    """Every member with its entry's `help`, for an option's help text: `raw: the reward; centered: ...`."""
    return "; ".join(f"{member.value}: {member.entry.help}" for member in choices)
