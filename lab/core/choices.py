"""Modes are `str` enums; a mode given by name is parsed here, once, with an error that lists the choices.

    parse_choice(DeltaMode, "centered", "delta mode")  ->  DeltaMode.centered
    parse_choice(DeltaMode, "median", "delta mode")    ->  ValueError: unknown delta mode 'median'; choose one of: ...
"""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

E = TypeVar("E", bound=Enum)


def parse_choice(choices: type[E], value: E | str, what: str, error: type[Exception] = ValueError) -> E:
    """The member of `choices` named `value` (or `value` itself); else `error` naming `what` and every choice."""
    try:
        return choices(value)
    except ValueError:
        names = ", ".join(m.value for m in choices)
        raise error(f"unknown {what} {value!r}; choose one of: {names}") from None
