"""`lab.exact.baselines` against the exact estimator moments of `lab.exact.estimators` and a brute-force minimum."""

import torch
from hypothesis import given

from tests.proofs.proof_tools import close, toys

from lab.exact.baselines import estimate_variance, optimal_baseline
from lab.exact.estimators import gradient_moments
from lab.exact.enumeration import all_probs, score_matrix


def exact_inputs(toy):
    """probs float[batch n], rewards float[batch n], scores float[batch n params] of a toy."""
    return all_probs(toy.policy, toy.prompts).detach(), toy.rewards, score_matrix(toy.policy, toy.prompts)


@given(toy=toys())
def test_estimate_variance_is_the_raw_estimator_variance_of_the_shifted_reward(toy):
    """tr Cov[(R - b) s] equals lab.exact.estimators' exact tr Cov for raw deltas, G = 1, rewards R - b."""
    probs, rewards, scores = exact_inputs(toy)
    for b in (0.0, 1.5, -2.0):
        moments = gradient_moments(toy.policy, toy.prompts, rewards - b, "raw", group_size=1)
        assert close(estimate_variance(probs, rewards, scores, b), moments.trace_cov)
    per_prompt = torch.arange(len(rewards), dtype=rewards.dtype)  # a different baseline for each prompt
    moments = gradient_moments(toy.policy, toy.prompts, rewards - per_prompt.unsqueeze(-1), "raw", group_size=1)
    assert close(estimate_variance(probs, rewards, scores, per_prompt), moments.trace_cov)


@given(toy=toys())
def test_a_shift_changes_the_variance_by_the_parabola(toy):
    """Var(b) - Var(0) = -2 b E[R |s|^2] + b^2 E[|s|^2]; for a constant reward b that is b^2 E[|s|^2]."""
    probs, rewards, scores = exact_inputs(toy)
    square_norms = (scores**2).sum(-1)
    for b in (0.5, -3.0):
        change = estimate_variance(probs, rewards, scores, b) - estimate_variance(probs, rewards, scores)
        expected = -2 * b * (probs * rewards * square_norms).sum(-1) + b**2 * (probs * square_norms).sum(-1)
        assert close(change, expected)
    constant = torch.full_like(rewards, 2.0)
    assert close(estimate_variance(probs, constant, scores), 4.0 * (probs * square_norms).sum(-1))


@given(toy=toys())
def test_the_optimal_baseline_beats_every_other_constant(toy):
    """b* is below the variance at a grid of baselines, the mean reward included (equal only if it is b*).

    Mutant: the mean reward E[R] as "the optimal baseline" is strictly worse on the lecture's policy
    (tested in test_the_mean_reward_is_not_the_optimal_baseline).
    """
    probs, rewards, scores = exact_inputs(toy)
    best = optimal_baseline(probs, rewards, scores)
    lowest = estimate_variance(probs, rewards, scores, best)
    slack = 1e-9 * lowest.abs().max() + 1e-10
    for b in torch.linspace(-5, 5, 41, dtype=rewards.dtype):
        assert (lowest <= estimate_variance(probs, rewards, scores, b) + slack).all()
    mean_reward = (probs * rewards).sum(-1)
    assert (lowest <= estimate_variance(probs, rewards, scores, mean_reward) + slack).all()


def test_the_mean_reward_is_not_the_optimal_baseline():
    """On the lecture's prompts and seed-5 policy, E[R] and b* differ and E[R] leaves more variance."""
    from lab.exact.enumeration import reward_table
    from lab.policies.factorized import Policy
    from tasks.sorting import make_task

    task = make_task()
    policy = Policy(task.vocab_size, 3, task.response_length, generator=torch.Generator().manual_seed(5)).double()
    probs = all_probs(policy, task.prompts).detach()
    rewards = reward_table(task.prompts, task.reward_fn("inclusion-ordering"), task.vocab_size,
                           task.response_length).double()
    scores = score_matrix(policy, task.prompts)
    best, mean_reward = optimal_baseline(probs, rewards, scores), (probs * rewards).sum(-1)
    assert ((best - mean_reward).abs() > 1e-3).all()
    assert (estimate_variance(probs, rewards, scores, mean_reward)
            > estimate_variance(probs, rewards, scores, best) * (1 + 1e-6)).all()
