"""The exercise checks reject the plausible wrong answers they were written against, and pass the right ones.

Each test runs only the cells of a lesson its checks need (`cells_of`: the lesson's first code cell, its imports and
setup, then the cells holding the named definitions, in the lesson's order, in one namespace), then calls a check
on a right answer and on each named wrong one: the wrong one must fail. A check that only compares can reject a
wrong *value*; a function that only calls the lab's own answer is rejected by `lab.exercises.check`'s `without`,
so those wrong answers go through the lesson's own check cell (`run_check_cell`). Slow: each runs part of a lesson.
"""

import copy
import runpy
from pathlib import Path

import jupytext
import pytest
import torch

from lab.exercises import EXERCISE_TAG, SOLVED_ENV, WrongAnswer

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def fails(test, *answer) -> bool:
    try:
        test(*answer)
    except AssertionError:
        return True
    return False


def code_cells(lesson: str) -> list[tuple[str, bool]]:
    """(source, is an exercise cell) of every code cell of a lesson."""
    return [(cell.source, EXERCISE_TAG in cell.metadata.get("tags", []))
            for cell in jupytext.read(NOTEBOOKS / f"{lesson}.py").cells if cell.cell_type == "code"]


def cells_of(lesson: str, *markers: str) -> dict:
    """The namespace after running the lesson's first code cell, its exercise cells (the placeholders its checks
    name) and every code cell containing one of `markers`, in the lesson's order."""
    cells = code_cells(lesson)
    namespace = {"__name__": "__main__"}
    for index, (source, exercise) in enumerate(cells):
        if index == 0 or exercise or any(marker in source for marker in markers):
            exec(compile(source, f"{lesson}[{index}]", "exec"), namespace)
    assert all(any(m in source for source, _ in cells) for m in markers), "a marker names no cell of the lesson"
    return namespace


def run_check_cell(lesson: str, namespace: dict, title: str, answer_code: str, monkeypatch) -> str:
    """Define an answer in the lesson's namespace and run the lesson's own check cell of `title` (the one whose
    check(...) call carries it) with LAB_EXERCISES=solved: '' if it passes, else the WrongAnswer's message."""
    monkeypatch.setenv(SOLVED_ENV, "solved")
    exec(answer_code, namespace)
    (check_cell,) = [source for source, _ in code_cells(lesson) if f'check("{title}' in source]
    try:
        exec(check_cell, namespace)
    except WrongAnswer as error:
        return str(error)
    return ""


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


def _own_group_only(ns, delta_fn, draws: int, mode: str = "normalized", only_next: bool = False) -> bool:
    """Exercise 2's solution, with the wrong answers as switches: one draw, another mode, only the next prompt
    redrawn."""
    generator = torch.Generator().manual_seed(0)
    draw = lambda: torch.randint(0, 6, (4, 6), generator=generator).float()  # noqa: E731
    for _ in range(draws):
        rewards = draw()
        for prompt in range(rewards.shape[0]):
            others = rewards.clone() if only_next else draw()
            if only_next:
                others[(prompt + 1) % len(rewards)] = draw()[0]
            others[prompt] = rewards[prompt]
            if not torch.equal(delta_fn(rewards, mode)[prompt], delta_fn(others, mode)[prompt]):
                return False
    return True


def _stays_put(ns, make_reference, yardstick: str) -> bool:
    """Exercise 3's solution (`yardstick="reference"`), and two wrong ones: the reference compared with the policy's
    outputs from before the step, or with the stepped policy's."""
    task, response_log_probs = ns["task"], ns["response_log_probs"]
    policy = ns["Policy"](task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(5))
    reference = make_reference(policy)
    before = (policy if yardstick == "policy before" else reference)(task.prompts).detach().clone()
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.1)
    optimizer.zero_grad()
    (-response_log_probs(policy(task.prompts), torch.zeros(3, 1, 3, dtype=torch.long)).mean()).backward()
    optimizer.step()
    if yardstick == "stepped policy":
        return not torch.equal(reference(task.prompts), policy(task.prompts))
    return torch.equal(reference(task.prompts), before)


@pytest.mark.slow
def test_lesson_05s_checks_catch_each_wrong_check(lesson05):
    """Exercise 1: old log-probs that keep their gradient. Exercise 2: one draw of rewards; mode "centered" (bug 4
    lives in the normalized mode only, as a real delta function's bug would); only the next prompt redrawn.
    Exercise 3: outputs compared with the policy's before the step; the reference compared with the stepped policy
    (it differs from it, yet moves with it: a copy sharing the embedding)."""
    ns = lesson05
    right = [("agrees_with_the_lab", lambda x: _agreement(ns, x, True)),
             ("flags_the_broken_std", lambda x: _own_group_only(ns, x, 20)),
             ("flags_the_live_reference", lambda x: _stays_put(ns, x, "reference"))]
    wrong = [("agrees_with_the_lab", lambda x: _agreement(ns, x, False)),
             ("flags_the_broken_std", lambda x: _own_group_only(ns, x, 1)),
             ("flags_the_broken_std", lambda x: _own_group_only(ns, x, 20, mode="centered")),
             ("flags_the_broken_std", lambda x: _own_group_only(ns, x, 20, only_next=True)),
             ("flags_the_live_reference", lambda x: _stays_put(ns, x, "policy before")),
             ("flags_the_live_reference", lambda x: _stays_put(ns, x, "stepped policy"))]
    for check, answer in right:
        assert not fails(ns[check], answer), check
    for check, answer in wrong:
        assert fails(ns[check], answer), check
    assert not _own_group_only(ns, copy.copy(ns["broken"](4)), 20)  # the bug itself is still caught


@pytest.mark.slow
def test_lesson_07_takes_three_digits_rounded_or_cut_off_and_nothing_further():
    """The text says three digits are enough: 0.167 and 0.166 (2/12 = 0.1666...) pass; 0.165, 0.168, 0.16 and
    0.25 (the leave-one-out scale 1/C) do not."""
    scale = cells_of("07_length_bias", "policy = AutoregressivePolicy(", "varying = updates_against_grad_j(",
                     "grad_j = X.expectation_gradient(",
                     "def test_centered_scale")["test_centered_scale"]
    for right in (2 / 12, 0.167, 0.166):
        assert not fails(scale, right), right
    for wrong in (0.165, 0.168, 0.16, 0.25):
        assert fails(scale, wrong), wrong


@pytest.mark.slow
def test_lesson_09s_checks_catch_log_of_sigmoid_the_naive_optimum_and_a_call_of_dpo_loss(monkeypatch):
    ns = cells_of("09_dpo", "def test_dpo_loss", "def test_optimum")

    def h(c, r, rc, rr):
        return (c - rc) - (r - rr)

    assert not fails(ns["test_dpo_loss"], lambda *a: -torch.nn.functional.logsigmoid(a[4] * h(*a[:4])))
    assert fails(ns["test_dpo_loss"], lambda *a: -torch.log(torch.sigmoid(a[4] * h(*a[:4]))))
    assert not fails(ns["test_optimum"], lambda p, r, beta: torch.softmax(p.log() + r / beta, dim=-1))
    naive = lambda p, r, beta: p * torch.exp(r / beta) / (p * torch.exp(r / beta)).sum(-1, keepdim=True)  # noqa: E731
    assert fails(ns["test_optimum"], naive)
    calls = "def my_dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta):\n" \
            "    return dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta)[0]\n"
    assert not fails(ns["test_dpo_loss"], lambda *a: ns["dpo_loss"](*a)[0])  # it does compute the right values
    assert "CallsTheLab" in run_check_cell("09_dpo", ns, "Exercise 1, the DPO loss", calls, monkeypatch)


@pytest.mark.slow
def test_lesson_10s_sft_check_catches_the_mask_missing_from_the_numerator_and_a_call_of_sft_loss(monkeypatch):
    """Padded log-probs are 0 in the lab, so a numerator without the mask agreed with the lab there: the check
    also puts other numbers on the padding, where only a masked numerator agrees."""
    ns = cells_of("10_before_rl", "def test_sft_loss")
    test = ns["test_sft_loss"]
    axes = (-3, -2, -1)
    assert not fails(test, lambda lp, m: -(lp * m).sum(axes) / m.sum(axes))
    assert fails(test, lambda lp, m: -lp.sum(axes) / m.sum(axes))  # the mask missing from the numerator
    assert fails(test, lambda lp, m: -(lp * m).sum(axes) / m[0].numel())  # divided by S x C, not the live tokens
    calls = "def my_sft_loss(log_probs, mask):\n    return sft_loss(log_probs, mask)\n"
    assert not fails(test, ns["sft_loss"])  # it does compute the right values
    assert "CallsTheLab" in run_check_cell("10_before_rl", ns, "Exercise 1, the SFT loss", calls, monkeypatch)


@pytest.mark.slow
def test_lesson_11s_best_of_n_check_rejects_a_call_of_best_of_n_kl(monkeypatch):
    ns = cells_of("11_reward_models", "for pairs in (16, 256):", "def test_bon_kl")
    calls = "def my_bon_kl(probs, scores, n):\n    return best_of_n_kl(probs, scores, n)\n"
    assert not fails(ns["test_bon_kl"], ns["best_of_n_kl"])  # it does compute the right values
    assert "CallsTheLab" in run_check_cell("11_reward_models", ns, "Exercise 2, best-of-n's KL", calls, monkeypatch)


@pytest.mark.slow
def test_lesson_12s_trl_fields_take_the_booleans_trl_maps_and_reject_the_per_token_beta():
    """TRL maps scale_rewards=True to "group" and False to "none" (GRPOConfig.__post_init__): both spellings pass.
    The lab's beta unscaled (TRL's KL term is the loss's aggregation of k3, the lab's C times it) fails."""
    test = cells_of("12_from_the_lab_to_trl", "def test_trl_fields")["test_trl_fields"]
    loss_type = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}

    def fields(scale, beta_factor):
        def answer(delta, loss_agg, kl, clip_eps, group_size, steps, max_length):
            return {"loss_type": loss_type[loss_agg], "scale_rewards": scale[delta],
                    "beta": kl * (max_length if beta_factor else 1), "epsilon": clip_eps,
                    "num_generations": group_size, "num_iterations": steps}
        return answer

    assert not fails(test, fields({"centered": "none", "normalized": "group"}, True))
    assert not fails(test, fields({"centered": False, "normalized": True}, True))
    assert fails(test, fields({"centered": True, "normalized": False}, True))
    assert fails(test, fields({"centered": False, "normalized": True}, False))


@pytest.mark.slow
def test_lesson_13s_checks_reject_cispo_without_its_stop_gradient_and_a_sequence_ratio_over_padding(monkeypatch):
    """Exercise 1: CISPO's loss with the weight left differentiable has the right value and the wrong gradient; PPO's
    clipped loss in its place has the wrong value. Exercise 2: the mean over every position (padding included) and
    the sum of the log-ratios (VESPO's) both fail. Calling the lab's own function is refused."""
    ns = cells_of("13_grpo_descendants", "def test_cispo", "def test_sequence_log_ratio")
    torch_ = ns["torch"]

    def undetached(log_probs, deltas, old, eps_max):
        weight = torch_.exp(log_probs - old).clamp(max=eps_max)
        return -(weight * deltas.unsqueeze(-1) * log_probs).mean()

    def ppo(log_probs, deltas, old, eps_max):
        rho = torch_.exp(log_probs - old)
        d = deltas.unsqueeze(-1)
        return -torch_.minimum(rho * d, rho.clamp(1 - 0.2, 1 + 0.2) * d).mean()

    def right(log_probs, deltas, old, eps_max):
        weight = torch_.exp(log_probs - old).clamp(max=eps_max).detach()
        return -(weight * deltas.unsqueeze(-1) * log_probs).mean()

    assert not fails(ns["test_cispo"], right)
    assert fails(ns["test_cispo"], undetached) and fails(ns["test_cispo"], ppo)

    def over_padding(log_probs, old, mask):
        return (log_probs - old).mean(-1, keepdim=True).expand_as(log_probs)

    def summed(log_probs, old, mask):
        return ((log_probs - old) * mask).sum(-1, keepdim=True).expand_as(log_probs)

    assert fails(ns["test_sequence_log_ratio"], over_padding) and fails(ns["test_sequence_log_ratio"], summed)
    calls = ("def my_sequence_log_ratio(log_probs, old_log_probs, mask):\n"
             "    return log_ratios(log_probs, old_log_probs, mask, 'sequence')\n")
    assert "CallsTheLab" in run_check_cell("13_grpo_descendants", ns, "Exercise 2, GSPO's sequence ratio", calls,
                                           monkeypatch)


def test_lesson_14s_checks_catch_the_uncapped_cost_one_draw_too_many_and_the_wrong_sequence_weights():
    """Exercise 1 rejects 1 / (1 - q) (no cap: infinite at q = 1), the closed form (1 - q^N) / (1 - q) (NaN at
    q = 1) and N + 1 terms; exercise 2 rejects GSPO's mean log ratio, clamping instead of zeroing, and padding
    counted. The solutions pass."""
    ns = cells_of("14_what_is_sampled", "def test_expected_draws", "def test_sequence_mask_weights")
    draws, weights = ns["test_expected_draws"], ns["test_sequence_mask_weights"]
    assert not fails(draws, lambda q, cap: sum(q ** k for k in range(cap)))
    assert fails(draws, lambda q, cap: 1 / (1 - q))
    assert fails(draws, lambda q, cap: (1 - q ** cap) / (1 - q))
    assert fails(draws, lambda q, cap: sum(q ** k for k in range(cap + 1)))

    def sequence_weights(mean=False, clamp=False, padding=False):
        def answer(old, sampling, mask, low, high):
            diff = old - sampling if padding else (old - sampling) * mask
            log_w = diff.sum(-1, keepdim=True) / (mask.sum(-1, keepdim=True) if mean else 1)
            w = log_w.exp()
            if clamp:
                return w.clamp(low, high)
            return torch.where((w < low) | (w > high), torch.zeros_like(w), w)
        return answer

    assert not fails(weights, sequence_weights())
    for wrong in ({"mean": True}, {"clamp": True}, {"padding": True}):
        assert fails(weights, sequence_weights(**wrong)), wrong
