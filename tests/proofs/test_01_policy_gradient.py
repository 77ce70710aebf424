"""Claims 1-5 (docs/claims.md): the policy-gradient identity, baselines, and what each delta mode estimates.

The per-group estimator is g = (1/G) sum_i d_i grad log pi(o_i | q); `lab.exact.estimators` gives its
exact expectation by enumerating groups (method `values`: every multiset of the group's rewards,
deltas from the lab's own `compute_deltas`), so "unbiased" and "biased" are exact statements.
"""

import torch
from einops import einsum
from hypothesis import assume, given
from hypothesis import strategies as st
from proof_tools import TOL, angle_deg, assume_not_degenerate, close, group_sizes, make_toy, toys

from lab.core.deltas import compute_deltas
from lab.exact.estimators import gradient_moments
from lab.exact.enumeration import all_log_probs, all_responses, position_log_probs, score_matrix


def expected_gradient(toy, mode, G):
    return gradient_moments(toy.policy, toy.prompts, toy.rewards, mode, G, method="values").mean


@given(toy=toys(min_length=2, max_length=3, max_vocab=2))
def test_claim_01_policy_gradient_is_the_reward_weighted_score(toy):
    """grad J = E[R grad log pi(o|q)], and log pi(o|q) is the sum of the per-position log-probs.

    Claim 1 (docs/claims.md), from the GRPO textbook chapter. grad J comes from autograd of the exact J; the
    right side is the exact sum over every response. The mutant (log pi taken as the *mean* of
    the per-position log-probs, a per-token average) is rejected by the same check.
    """
    grad_j = toy.grad_j()
    scores = score_matrix(toy.policy, toy.prompts)  # float[batch n params]
    identity = einsum(toy.probs() * toy.rewards, scores, "batch n, batch n params -> batch params")
    assert close(identity, grad_j)

    table = position_log_probs(toy.policy, toy.prompts)  # float[batch pos vocab]
    responses = all_responses(toy.vocab_size, toy.length)  # int[n pos]
    summed = sum(table[:, q, responses[:, q]] for q in range(toy.length))  # float[batch n]
    assert close(all_log_probs(toy.policy, toy.prompts), summed)
    assert close(toy.probs().sum(-1), torch.ones(len(toy.prompts)))

    assume(grad_j.norm() > TOL.differs)
    mutant = identity / toy.length  # the score of the mean per-position log-prob
    assert not close(mutant, grad_j)


@given(toy=toys(), baseline=st.floats(-10, 10))
def test_claim_02_a_baseline_independent_of_the_output_has_zero_expected_gradient(toy, baseline):
    """For any b that does not depend on the sampled output, E[grad log pi(o|q) * b] = 0, so
    E[(R - b) grad log pi] = grad J: subtracting it leaves the expected gradient unchanged.

    Claim 2 (docs/claims.md), the baseline theorem of the GRPO textbook chapter. Mutant: a "baseline" that
    depends on the output (a random table b(o)) moves the expectation, and the check catches it.
    """
    probs, scores = toy.probs(), score_matrix(toy.policy, toy.prompts)
    b = torch.full_like(toy.rewards, baseline)
    baseline_term = einsum(probs * b, scores, "batch n, batch n params -> batch params")
    assert close(baseline_term, torch.zeros_like(baseline_term))
    with_baseline = einsum(probs * (toy.rewards - b), scores, "batch n, batch n params -> batch params")
    assert close(with_baseline, toy.grad_j())

    assume_not_degenerate(toy)
    output_dependent = torch.rand(toy.rewards.shape, generator=toy.generator, dtype=torch.float64)
    mutant = einsum(probs * output_dependent, scores, "batch n, batch n params -> batch params")
    assert not close(mutant, torch.zeros_like(mutant))


@given(toy=toys(), G=group_sizes)
def test_claim_03_leave_one_out_baseline_is_unbiased(toy, G):
    """Deltas R_i - mean of the other G-1 rewards give an estimator whose expectation is exactly grad J.

    Claim 3 (docs/claims.md), the GRPO textbook chapter: the others' mean is independent of o_i, so claim 2 applies.
    Mutant: a baseline that includes R_i itself (the full-group mean, i.e. `centered`) fails it.
    """
    grad_j = toy.grad_j()
    assert close(expected_gradient(toy, "loo", G), grad_j)
    assume(grad_j.norm() > TOL.differs)
    assert not close(expected_gradient(toy, "centered", G), grad_j)


@given(toy=toys(), G=group_sizes)
def test_claim_04_group_mean_baseline_shrinks_the_gradient_by_G_minus_1_over_G(toy, G):
    """R_i - mean = (G-1)/G (R_i - leave-one-out mean), so the centered estimator's expectation is
    exactly (G-1)/G grad J: the same direction, a smaller scale.

    Claim 4 (docs/claims.md), the GRPO textbook chapter. Both the per-group identity and the expectation are checked;
    the mutant statement "centered is unbiased" (scale 1) is rejected by the same check.
    """
    group = torch.randint(toy.rewards.shape[1], (G,), generator=toy.generator)  # a group of G responses
    rewards = toy.rewards[:, group]
    assert close(compute_deltas(rewards, "centered"), (G - 1) / G * compute_deltas(rewards, "loo"))

    grad_j = toy.grad_j()
    centered = expected_gradient(toy, "centered", G)
    assert close(centered, (G - 1) / G * grad_j)
    assume(grad_j.norm() > TOL.differs)
    assert not close(centered, grad_j)


@given(rewards=st.lists(st.integers(0, 5), min_size=2, max_size=5), scale=st.floats(0.1, 10))
def test_claim_05_std_normalization_keeps_signs_and_order_within_a_group(rewards, scale):
    """Dividing centered deltas by the group std keeps every sign and the order within the group.

    Claim 5 (docs/claims.md; first half), the GRPO textbook chapter. Mutant: `max` deltas keep neither (all
    non-maximal rewards collapse to 0), and the same check rejects them when the group has 3 levels.
    """
    r = torch.tensor(rewards, dtype=torch.float64) * scale
    centered, normalized = compute_deltas(r, "centered"), compute_deltas(r, "normalized")
    assert torch.equal(torch.sign(normalized), torch.sign(centered))
    pairs = r.unsqueeze(0) - r.unsqueeze(1)  # the order of every pair of the group
    assert torch.equal(torch.sign(normalized.unsqueeze(0) - normalized.unsqueeze(1)), torch.sign(pairs))

    if len(set(rewards)) >= 3:
        mutant = compute_deltas(r, "max")
        order_kept = torch.equal(torch.sign(mutant.unsqueeze(0) - mutant.unsqueeze(1)), torch.sign(pairs))
        assert not (order_kept and torch.equal(torch.sign(mutant), torch.sign(centered)))


def find_biased_toy(mode, G, min_angle_deg):
    """The first seed whose exact expected gradient under `mode` is at least `min_angle_deg` off grad J."""
    for seed in range(50):
        toy = make_toy(seed, vocab_size=3, length=2, batch=1, logit_scale=2.0)
        expected, grad_j = expected_gradient(toy, mode, G)[0], toy.grad_j()[0]
        if angle_deg(expected, grad_j) >= min_angle_deg:
            return toy
    raise AssertionError(f"no counterexample found for {mode}")


def test_claim_05_std_normalization_is_biased_not_parallel_to_grad_J():
    """Dividing by the group std is a heuristic outside the baseline theorem: its expected
    gradient is in general not parallel to grad J (a counterexample is found and checked exactly).

    Claim 5 (docs/claims.md; second half), the GRPO textbook chapter. The detector is shown to discriminate: on the
    same toy the leave-one-out estimator is exactly parallel (angle 0).
    """
    G = 3
    toy = find_biased_toy("normalized", G, min_angle_deg=5.0)
    grad_j = toy.grad_j()[0]
    assert angle_deg(expected_gradient(toy, "normalized", G)[0], grad_j) >= 5.0
    assert angle_deg(expected_gradient(toy, "loo", G)[0], grad_j) < 1e-4


def test_claim_05_max_only_deltas_are_biased_too():
    """Keeping only the group's maximal rewards (`max` deltas) also has an expected gradient that
    is not parallel to grad J (exact counterexample).

    Claim 5 (docs/claims.md), for the `max` mode of the CS336 lecture 17 notes; a negative claim shown by a
    counterexample. Detector check: `centered`, scaled by (G-1)/G but parallel, passes.
    """
    G = 3
    toy = find_biased_toy("max", G, min_angle_deg=5.0)
    grad_j = toy.grad_j()[0]
    assert angle_deg(expected_gradient(toy, "max", G)[0], grad_j) >= 5.0
    assert angle_deg(expected_gradient(toy, "centered", G)[0], grad_j) < 1e-4
