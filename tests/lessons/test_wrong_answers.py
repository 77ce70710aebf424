"""The exercise checks catch the plausible wrong answers they were written against (and pass the right ones).

Each lesson script runs once as a plain module (`runpy`, its placeholders unsolved), then its check functions
are called on a right answer and on the named wrong one: the wrong one must raise. Slow: it runs three lessons.
"""

import runpy
from pathlib import Path

import pytest
import torch

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def fails(test, answer) -> bool:
    try:
        test(answer)
    except AssertionError:
        return True
    return False


@pytest.fixture(scope="module")
def lesson05():
    return runpy.run_path(str(NOTEBOOKS / "05_silent_bugs.py"))


def _agreement(ns, ratio, detach: bool) -> float:
    policy, task, responses, deltas = (ns[k] for k in ("policy", "task", "responses", "deltas"))

    def gradient(loss_of):
        policy.zero_grad()
        loss_of(ns["response_log_probs"](policy(task.prompts), responses)).backward()
        return torch.cat([p.grad.flatten() for p in policy.parameters()])

    token_deltas = deltas.unsqueeze(-1)
    with_ratio = gradient(lambda lp: -(ratio(lp, lp.detach() if detach else lp) * token_deltas).mean())
    plain = gradient(lambda lp: -(lp * token_deltas).mean())
    if with_ratio.norm() == 0 or plain.norm() == 0:
        return 0.0
    return (with_ratio @ plain / (with_ratio.norm() * plain.norm())).item()


def _own_group_only(ns, delta_fn, draws: int) -> bool:
    generator = torch.Generator().manual_seed(0)
    draw = lambda: torch.randint(0, 6, (4, 6), generator=generator).float()  # noqa: E731
    for _ in range(draws):
        rewards = draw()
        for prompt in range(rewards.shape[0]):
            others = draw()
            others[prompt] = rewards[prompt]
            if not torch.equal(delta_fn(rewards, "normalized")[prompt], delta_fn(others, "normalized")[prompt]):
                return False
    return True


def _stays_put(ns, make_reference, before_of_policy: bool) -> bool:
    task, response_log_probs = ns["task"], ns["response_log_probs"]
    policy = ns["Policy"](task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(5))
    reference = make_reference(policy)
    before = (policy if before_of_policy else reference)(task.prompts).detach().clone()
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.1)
    optimizer.zero_grad()
    (-response_log_probs(policy(task.prompts), torch.zeros(3, 1, 3, dtype=torch.long)).mean()).backward()
    optimizer.step()
    return torch.equal(reference(task.prompts), before)


@pytest.mark.slow
def test_lesson_05s_checks_catch_a_ratio_without_detach_a_single_draw_and_the_policy_as_the_yardstick(lesson05):
    """Exercise 1: old log-probs that keep their gradient; exercise 2: one draw of rewards; exercise 3: outputs
    compared with the policy's before the step instead of the reference's."""
    ns = lesson05
    cases = [("agrees_with_the_lab", _agreement, True, False), ("flags_the_broken_std", _own_group_only, 20, 1),
             ("flags_the_live_reference", _stays_put, False, True)]
    for check, answer, right, wrong in cases:
        assert not fails(ns[check], lambda x, a=answer, v=right: a(ns, x, v)), check
        assert fails(ns[check], lambda x, a=answer, v=wrong: a(ns, x, v)), check


@pytest.mark.slow
def test_lesson_09s_checks_catch_log_of_sigmoid_and_the_naive_optimum_and_lesson_07_takes_three_digits():
    ns = runpy.run_path(str(NOTEBOOKS / "09_dpo.py"))

    def h(c, r, rc, rr):
        return (c - rc) - (r - rr)

    assert not fails(ns["test_dpo_loss"], lambda *a: -torch.nn.functional.logsigmoid(a[4] * h(*a[:4])))
    assert fails(ns["test_dpo_loss"], lambda *a: -torch.log(torch.sigmoid(a[4] * h(*a[:4]))))
    assert not fails(ns["test_optimum"], lambda p, r, beta: torch.softmax(p.log() + r / beta, dim=-1))
    naive = lambda p, r, beta: p * torch.exp(r / beta) / (p * torch.exp(r / beta)).sum(-1, keepdim=True)  # noqa: E731
    assert fails(ns["test_optimum"], naive)
    scale = runpy.run_path(str(NOTEBOOKS / "07_length_bias.py"))["test_centered_scale"]
    assert not fails(scale, 2 / 12) and not fails(scale, 0.167)
    assert fails(scale, 0.16) and fails(scale, 0.25)
