"""Graded exercises in the lessons: the student's code, a check against the lab, a hidden solution.

    exercise cell   def leave_one_out(rewards):            the student's code; `...` marks what is
                        return ...                          still to write (a value, or a return value)
    solution cell   markdown tagged "solution": a <details> block (collapsed until clicked) holding
                    the answer as a ```python block; markdown never runs, so "Run all" shows no answer
    check cell      check("leave-one-out deltas", test, leave_one_out)

`check(title, test, *answers)` runs `test(*answers)`, where `test` asserts the answers against the
lab. An answer that is still the placeholder `...` (or a function that returns `...` or None) is
*not yet solved*: check prints one line saying so and returns False, so "Run all" reads through the
lesson instead of stopping at the first exercise. A wrong answer raises `WrongAnswer` (an
AssertionError) with the test's message. A right one prints "solved" and returns True.

The test suite (tests/lessons/test_notebooks.py) executes every lesson once, as a student's "Run
all" (every check must say "not yet solved"); then, in the same kernel, with the environment
variable LAB_EXERCISES=solved set there (an unsolved check is an error), it runs the code of each
solution cell's ```python block followed by its check cell: so every solution is run and must pass
its check. This works because later cells use the lab's functions, never the student's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

SOLVED_ENV = "LAB_EXERCISES"
"""Environment variable: `solved` turns "not yet solved" into an error (the test suite sets it)."""
SOLUTION_TAG = "solution"
"""Cell tag of a solution (a markdown cell whose ```python blocks are the answer)."""
EXERCISE_TAG = "exercise"
"""Cell tag of the code cell a student edits."""


class NotSolved(Exception):
    """An answer is still the placeholder `...`."""


class WrongAnswer(AssertionError):
    """An answer was given and its check failed."""


def _unfinished(value: Any) -> bool:
    if value is Ellipsis or value is None:
        return True
    return isinstance(value, tuple) and any(v is Ellipsis for v in value)


def _guard(answer: Any, position: int) -> Any:
    """The answer, or a function that raises NotSolved where the student's function returns `...`."""
    if answer is Ellipsis:
        raise NotSolved(f"answer {position + 1} is still `...`")
    if not callable(answer):
        return answer

    def guarded(*args, **kwargs):
        result = answer(*args, **kwargs)
        if _unfinished(result):
            name = getattr(answer, "__name__", "the function")
            raise NotSolved(f"{name} returns {'None' if result is None else '...'} (not written yet?)")
        return result

    return guarded


def require_solved() -> bool:
    """True where unsolved exercises are errors (LAB_EXERCISES=solved, as in the test suite)."""
    return os.environ.get(SOLVED_ENV, "") == "solved"


def check(title: str, test: Callable[..., None], *answers: Any) -> bool:
    """Run `test(*answers)`: True and one line if it passes, False and one line if not yet solved.

    A failing assertion (or any other error of the student's code) is raised as `WrongAnswer`
    naming the exercise, with the original error chained.
    """
    try:
        test(*(_guard(answer, i) for i, answer in enumerate(answers)))
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
