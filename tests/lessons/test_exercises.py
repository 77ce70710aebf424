"""lab.exercises: an unsolved exercise says so, a wrong one fails by name, a right one passes."""

import pytest

from lab.exercises import SOLVED_ENV, WrongAnswer, check, solution_code


def double_test(double):
    assert double(3) == 6, f"double(3) gave {double(3)}"


def placeholder(x):
    return ...


def forgot_return(x):
    x * 2


def test_a_placeholder_is_not_yet_solved_and_does_not_stop_the_notebook(capsys, monkeypatch):
    monkeypatch.delenv(SOLVED_ENV, raising=False)
    assert check("doubling", double_test, placeholder) is False
    assert check("doubling", double_test, forgot_return) is False
    assert check("a value", lambda v: None, ...) is False
    assert check("a pair", double_test, lambda x: (..., ...)) is False
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(line.startswith(("doubling: not yet solved", "a value: not yet solved",
                                                    "a pair: not yet solved")) for line in lines)


def test_under_the_test_suites_setting_a_placeholder_is_an_error(monkeypatch):
    monkeypatch.setenv(SOLVED_ENV, "solved")
    with pytest.raises(WrongAnswer, match="doubling: not solved"):
        check("doubling", double_test, placeholder)


def test_a_wrong_answer_fails_naming_the_exercise_and_a_right_one_passes(capsys):
    with pytest.raises(WrongAnswer, match=r"doubling: not right yet: AssertionError: double\(3\) gave 9"):
        check("doubling", double_test, lambda x: x * x)
    with pytest.raises(WrongAnswer, match="doubling: not right yet: TypeError"):
        check("doubling", double_test, lambda x, y: x)
    assert check("doubling", double_test, lambda x: 2 * x) is True
    assert capsys.readouterr().out.strip() == "doubling: solved"


def test_solution_code_is_the_python_blocks_of_the_markdown():
    markdown = ("<details><summary>Solution</summary>\n\nWhy it works.\n\n```python\ndef f(x):\n    return 2 * x\n"
                "```\n\nThen:\n\n```python\ny = f(1)\n```\n\n```text\nnot code\n```\n</details>")
    assert solution_code(markdown) == "def f(x):\n    return 2 * x\n\ny = f(1)\n"
    with pytest.raises(ValueError, match="no ```python block"):
        solution_code("<details>nothing</details>")
