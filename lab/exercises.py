"""Graded exercises in the lessons: the student's code, a check against the lab, a hidden solution.

    exercise cell   def leave_one_out(rewards):            the student's code; `...` marks what is
                        return ...                          still to write (a value, or a return value)
    solution cell   markdown tagged "solution": a <details> block (collapsed until clicked) holding
                    the answer as a ```python block; markdown never runs, so "Run all" shows no answer
    check cell      check("leave-one-out deltas", test, leave_one_out)

`check(title, test, *answers, without=(...))` runs `test(*answers)`, where `test` asserts the answers
against the lab. An answer that is still the placeholder `...` (or a function that returns `...` or
None) is *not yet solved*: check prints one line saying so and returns False, so "Run all" reads
through the lesson instead of stopping at the first exercise. A wrong answer raises `WrongAnswer` (an
AssertionError) with the test's message. A right one prints "solved" and returns True.

`without` names the lab's own answer to the exercise (the functions, classes or tables the test
compares with). While the student's function runs, and only then, every name by which its code can
reach one of them (the names of the notebook the function was defined in, the attributes and
dispatch tables of every loaded `lab` and `tasks` module, a method's class) is bound to a stand-in
that raises `CallsTheLab`: a function that only calls the lab's answer is a wrong answer, while the
test itself, which runs outside the student's function, compares with the real one. It catches a
call, not a copy or a disguise (notebooks/README.md).

The test suite (tests/lessons/test_notebooks.py) executes every lesson once, as a student's "Run
all" (every check must say "not yet solved"); then, in the same kernel, with the environment
variable LAB_EXERCISES=solved set there (an unsolved check is an error), it runs the code of each
solution cell's ```python block followed by its check cell: so every solution is run and must pass
its check. This works because later cells use the lab's functions, never the student's.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

SOLVED_ENV = "LAB_EXERCISES"
"""Environment variable: `solved` turns "not yet solved" into an error (the test suite sets it)."""
SOLUTION_TAG = "solution"
"""Cell tag of a solution (a markdown cell whose ```python blocks are the answer)."""
EXERCISE_TAG = "exercise"
"""Cell tag of the code cell a student edits."""
LAB_PACKAGES = ("lab", "tasks")
"""The packages whose loaded modules' names a student's function could reach the lab's answer through."""


class NotSolved(Exception):
    """An answer is still the placeholder `...`."""


class WrongAnswer(AssertionError):
    """An answer was given and its check failed."""


class CallsTheLab(Exception):
    """The student's function used the lab's own answer to the exercise (`check`'s `without`)."""


class _StandIn:
    """What a hidden lab answer's names point to while the student's function runs: any use raises."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _refuse(self, *args, **kwargs):
        raise CallsTheLab(f"your code uses the lab's own {self._name}, which is this exercise's answer: "
                          "write it without it")

    __call__ = __getitem__ = __iter__ = __len__ = __contains__ = _refuse

    def __getattr__(self, attribute: str):
        self._refuse()


def _name(target: Any) -> str:
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(target).__name__


def _places(hidden: tuple, answers: Iterable[Any]) -> list[tuple[Any, str, Any]]:
    """(namespace, key, stand-in) of every name that holds a hidden object: a dict (module globals, a
    dispatch table) is set by key, a class by attribute."""
    wanted = {id(target): _StandIn(_name(target)) for target in hidden}
    namespaces = [a.__globals__ for a in answers if isinstance(getattr(a, "__globals__", None), dict)]
    namespaces += [vars(module) for name, module in list(sys.modules.items())
                   if module is not None and name.split(".")[0] in LAB_PACKAGES]
    found: dict[tuple[int, str], tuple[Any, str, Any]] = {}
    for namespace in namespaces:
        tables = [namespace, *(value for value in namespace.values() if type(value) is dict)]
        for table in tables:
            for key, value in list(table.items()):
                if id(value) in wanted and not isinstance(value, _StandIn):
                    found[(id(table), key)] = (table, key, wanted[id(value)])
    for target in hidden:  # a method: its class's attribute
        owner_name, _, attribute = getattr(target, "__qualname__", "").rpartition(".")
        owner = sys.modules.get(getattr(target, "__module__", ""), None)
        for part in owner_name.split(".") if owner_name and owner else ():
            owner = getattr(owner, part, None)
        if isinstance(owner, type) and owner.__dict__.get(attribute) is target:
            found[(id(owner), attribute)] = (owner, attribute, wanted[id(target)])
    return list(found.values())


@contextmanager
def _hidden(places: list[tuple[Any, str, Any]]) -> Iterator[None]:
    """Every place bound to its stand-in for the length of the block, then restored."""
    saved = []
    try:
        for namespace, key, stand_in in places:
            if isinstance(namespace, dict):
                saved.append((namespace, key, namespace[key]))
                namespace[key] = stand_in
            else:
                saved.append((namespace, key, namespace.__dict__[key]))
                setattr(namespace, key, stand_in)
        yield
    finally:
        for namespace, key, original in reversed(saved):
            if isinstance(namespace, dict):
                namespace[key] = original
            else:
                setattr(namespace, key, original)


def _unwrapped(answer: Any) -> Any:
    """The function under any functools.partial layers."""
    while isinstance(answer, functools.partial):
        answer = answer.func
    return answer


def _unfinished(value: Any) -> bool:
    if value is Ellipsis or value is None:
        return True
    return isinstance(value, tuple) and any(v is Ellipsis for v in value)


def _guard(answer: Any, position: int, hidden: tuple, places: list) -> Any:
    """The answer, or a function that raises NotSolved where the student's function returns `...` and runs
    it with the hidden lab answers' names bound to stand-ins."""
    if answer is Ellipsis:
        raise NotSolved(f"answer {position + 1} is still `...`")
    if not callable(answer):
        return answer
    if any(_unwrapped(answer) is target for target in hidden):
        raise CallsTheLab(f"answer {position + 1} is the lab's own {_name(_unwrapped(answer))}: write it yourself")

    def guarded(*args, **kwargs):
        with _hidden(places):
            result = answer(*args, **kwargs)
        if _unfinished(result):
            name = getattr(answer, "__name__", "the function")
            raise NotSolved(f"{name} returns {'None' if result is None else '...'} (not written yet?)")
        return result

    return guarded


def require_solved() -> bool:
    """True where unsolved exercises are errors (LAB_EXERCISES=solved, as in the test suite)."""
    return os.environ.get(SOLVED_ENV, "") == "solved"


def check(title: str, test: Callable[..., None], *answers: Any, without: tuple = ()) -> bool:
    """Run `test(*answers)`: True and one line if it passes, False and one line if not yet solved.

    A failing assertion (or any other error of the student's code, `CallsTheLab` included) is raised
    as `WrongAnswer` naming the exercise, with the original error chained. `without`: the lab's own
    answers, hidden from the student's functions while they run (module docstring).
    """
    hidden = tuple(without)
    places = _places(hidden, answers) if hidden else []
    try:
        test(*(_guard(answer, i, hidden, places) for i, answer in enumerate(answers)))
    except NotSolved as unsolved:
        if require_solved():
            raise WrongAnswer(f"{title}: not solved ({unsolved}) although {SOLVED_ENV}=solved") from None
        print(f"{title}: not yet solved ({unsolved}). Write it in the cell above; "
              f"the solution is in the collapsed cell between them.")
        return False
    except Exception as error:  # the student's code: say which exercise failed, keep the cause
        raise WrongAnswer(f"{title}: not right yet: {type(error).__name__}: {error}") from error
    print(f"{title}: solved")
    return True


FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def solution_code(markdown: str) -> str:
    """The code of a solution cell: its ```python blocks, in order, joined by a blank line."""
    blocks = [block.rstrip("\n") for block in FENCE.findall(markdown)]
    if not blocks:
        raise ValueError("a solution cell holds no ```python block")
    return "\n\n".join(blocks) + "\n"
