"""pass@k and maj@k: exact formulas against brute-force enumeration of every sample sequence."""

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lab.exact.enumeration
from lab.exact.enumeration import ExactLimits, all_probs, reward_table
from lab.exact.voting import maj_at_k, pass_at_k
from lab.policies.factorized import Policy
from lab.exact.voting import MonteCarloWarning, brute_force_maj_at_k, maj_at_k_from_probs, optimal_mask, pass_at_k_from_probs
from tasks.sorting import lecture_prompts


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 4), k=st.integers(1, 5), power=st.sampled_from([1, 3]))
def test_maj_at_k_equals_brute_force_over_all_sample_sequences(seed, n, k, power):
    """Every n^k sequence of samples, its plurality winner, ties split evenly: equal to 1e-12."""
    generator = torch.Generator().manual_seed(seed)
    probs = torch.rand(n, generator=generator, dtype=torch.float64) ** power
    probs /= probs.sum()
    rewards = torch.randint(0, 3, (n,), generator=generator).double()
    exact = maj_at_k_from_probs(probs, rewards, range(1, k + 1))
    optimal = optimal_mask(rewards).tolist()
    brute = [brute_force_maj_at_k(probs.tolist(), optimal, j) for j in range(1, k + 1)]
    assert exact.tolist() == pytest.approx(brute, abs=1e-12)
    p_opt = float(probs[optimal_mask(rewards)].sum())
    assert pass_at_k_from_probs(probs, rewards, [k]).item() == pytest.approx(1 - (1 - p_opt) ** k, abs=1e-12)


def test_maj_at_one_and_two_are_pass_at_one():
    """One sample wins its own vote; two different samples tie and split it: maj@1 = maj@2 = pass@1."""
    probs = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]], dtype=torch.float64)
    rewards = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    maj = maj_at_k_from_probs(probs, rewards, [1, 2])
    torch.testing.assert_close(maj[:, 0], maj[:, 1])
    torch.testing.assert_close(maj[:, 0], pass_at_k_from_probs(probs, rewards, [1])[:, 0])


def test_a_mutant_without_the_tie_break_fails():
    """Counting a tie as a loss (the y factor 0) is a different, smaller number: the brute force tells them apart."""
    probs, optimal = [0.5, 0.3, 0.2], [True, False, False]
    assert brute_force_maj_at_k(probs, optimal, 2) == pytest.approx(0.5)
    assert 0.5**2 != pytest.approx(maj_at_k_from_probs(torch.tensor(probs, dtype=torch.float64),
                                                       torch.tensor([1.0, 0, 0]), [2]).item())


def test_maj_at_k_is_fast_and_sane_at_the_lecture_size():
    """125 responses, k up to 64: a distribution concentrated on the optimum wins almost surely at large k."""
    probs = torch.full((125,), 0.4 / 124, dtype=torch.float64)
    probs[5] = 0.6
    rewards = torch.zeros(125)
    rewards[5] = 1
    maj = maj_at_k_from_probs(probs, rewards, [1, 8, 64])
    assert maj[0].item() == pytest.approx(0.6) and maj[2].item() > 1 - 1e-9 and maj[1] > maj[0]


def test_policy_versions_enumerate_the_policy():
    policy = Policy(5, 3, 3, generator=torch.Generator().manual_seed(5), init_scale=0.3)
    prompts = lecture_prompts()
    probs = all_probs(policy, prompts, torch.float64).detach()
    table = reward_table(prompts, "inclusion-ordering", 5, 3).double()
    torch.testing.assert_close(pass_at_k(policy, prompts, "inclusion-ordering", [1, 10]),
                               pass_at_k_from_probs(probs, table, [1, 10]))
    assert pass_at_k(policy, prompts, "inclusion-ordering", 3).shape == (3,)
    torch.testing.assert_close(maj_at_k(policy, prompts.tolist(), "inclusion-ordering", 4),
                               maj_at_k_from_probs(probs, table, [4])[:, 0])


def test_past_the_limit_both_are_labelled_monte_carlo_estimates(monkeypatch):
    policy = Policy(5, 3, 3, generator=torch.Generator().manual_seed(5), init_scale=0.1)
    prompts = lecture_prompts()
    exact_pass = pass_at_k(policy, prompts, "inclusion-ordering", [1, 16])
    exact_maj = maj_at_k(policy, prompts, "inclusion-ordering", [1, 16])
    monkeypatch.setattr(lab.exact.enumeration, "LIMITS", ExactLimits(max_responses=100))  # voting reads it there
    with pytest.warns(MonteCarloWarning, match="Monte Carlo"):
        sampled_pass = pass_at_k(policy, prompts, "inclusion-ordering", [1, 16], torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MonteCarloWarning)
        sampled_maj = maj_at_k(policy, prompts, "inclusion-ordering", [1, 16], torch.Generator().manual_seed(0))
    # 4096 sets: standard errors below 0.008
    torch.testing.assert_close(sampled_pass, exact_pass, atol=0.03, rtol=0)
    torch.testing.assert_close(sampled_maj, exact_maj, atol=0.03, rtol=0)


@pytest.mark.parametrize("k", [0, -1, [], [1, 0], 1.5, True])
def test_bad_k_is_refused(k):
    policy = Policy(5, 3, 3, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="k must be"):
        pass_at_k(policy, lecture_prompts(), "distance", k)
    with pytest.raises(ValueError, match="k must be"):
        maj_at_k(policy, lecture_prompts(), "distance", k)
