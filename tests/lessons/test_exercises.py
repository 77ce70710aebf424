"""lab.exercises: an unsolved exercise says so, a wrong one fails by name, a right one passes, and one that only
calls the lab's own answer fails."""

import functools

import pytest
import torch

import lab.core.kl
import lab.core.sft
from lab.bridge.trl_grpo import LOSS_TYPES, TRLGRPO
from lab.core.kl import k3
from lab.core.sft import sft_loss
from lab.exercises import SOLVED_ENV, CallsTheLab, WrongAnswer, _StandIn, check, solution_code


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


# `check(..., without=...)`: a function that only calls the lab's own answer is a wrong answer.

LOG_PROBS = -torch.rand(2, 3, 4, dtype=torch.float64)
MASK = torch.ones(2, 3, 4, dtype=torch.bool)


def sft_test(my_sft_loss):
    """The exercise's test: the student's loss against the lab's, which the test itself calls."""
    assert torch.allclose(my_sft_loss(LOG_PROBS, MASK), sft_loss(LOG_PROBS, MASK))


def written(log_probs, mask):
    live = mask.to(log_probs.dtype)
    return -(log_probs * live).sum() / live.sum()


def by_name(log_probs, mask):
    return sft_loss(log_probs, mask)


def through_the_module(log_probs, mask):
    return lab.core.sft.sft_loss(log_probs, mask)


def through_a_helper(log_probs, mask):
    return by_name(log_probs, mask)


def k3_through_its_table(log_probs, ref_log_probs):
    return lab.core.kl.ESTIMATORS["k3"](log_probs, ref_log_probs)


def k3_test(my_k3):
    assert torch.allclose(my_k3(LOG_PROBS, LOG_PROBS.flip(-1)), k3(LOG_PROBS, LOG_PROBS.flip(-1)))


def test_a_function_that_only_calls_the_labs_answer_fails_its_check_and_one_that_writes_it_passes(capsys):
    """Called by its name, through its module, through a helper of the notebook, through a dispatch table, or
    given as the answer itself (or a partial of it): each raises CallsTheLab inside the student's function, which
    the check reports as a wrong answer. Without `without` the same delegating answer passes: the mechanism, not
    the test, rejects it (the mutant). The test's own call of the lab's function is untouched."""
    assert check("SFT", sft_test, written, without=(sft_loss,)) is True
    for delegating in (by_name, through_the_module, through_a_helper, sft_loss, functools.partial(sft_loss)):
        with pytest.raises(WrongAnswer, match=r"SFT: not right yet: CallsTheLab: .*lab's own sft_loss"):
            check("SFT", sft_test, delegating, without=(sft_loss,))
        assert check("SFT", sft_test, delegating) is True  # the mutant: nothing hidden
    with pytest.raises(WrongAnswer, match="CallsTheLab"):
        check("k3", k3_test, k3_through_its_table, without=(k3,))
    assert capsys.readouterr().out.count(": solved") == 6


def test_every_hidden_name_is_restored_after_the_check_passes_or_fails():
    """The lab is unchanged after a check: its module attributes, dispatch tables and this module's names are the
    original objects again, whether the answer passed, failed or raised."""
    for answer in (written, by_name, k3_through_its_table):
        try:
            check("SFT", sft_test, answer, without=(sft_loss, k3))
        except WrongAnswer:
            pass
        assert lab.core.sft.sft_loss is sft_loss and globals()["sft_loss"] is sft_loss
        assert lab.core.kl.k3 is k3 and lab.core.kl.ESTIMATORS["k3"] is k3


def test_a_hidden_method_and_a_hidden_table_refuse_every_use():
    """A method is hidden on its class (so an instance's call raises), a dict on every name that holds it (so a
    lookup raises, not only a call)."""

    def fields(loss_agg):
        return {"loss_type": LOSS_TYPES[loss_agg]}

    def from_the_lab(loss_agg):
        return {"loss_type": TRLGRPO(loss_agg=loss_agg).grpo_config(None, "/tmp/unused").loss_type}

    def table_test(answer):
        assert answer("token-mean")["loss_type"] == "bnpo"

    for answer, hidden in ((fields, LOSS_TYPES), (from_the_lab, TRLGRPO.grpo_config)):
        with pytest.raises(WrongAnswer, match="CallsTheLab"):
            check("fields", table_test, answer, without=(hidden,))
    assert TRLGRPO.__dict__["grpo_config"] is not None and LOSS_TYPES["token-mean"] == "bnpo"
    with pytest.raises(CallsTheLab):
        _StandIn("x")["anything"]
