"""Claim 4 (docs/claims.md): the group mean shrinks the gradient by (G-1)/G.

The per-group estimator is g = (1/G) sum_i d_i grad log pi(o_i | q); `lab.exact.estimators` gives its
exact expectation by enumerating groups (method `values`: every multiset of the group's rewards,
deltas from the lab's own `compute_deltas`), so "unbiased" and "biased" are exact statements.
"""

import torch
from hypothesis import assume, given

from lab.core.deltas import compute_deltas
from tests.proofs.proof_tools import close, expected_gradient, group_sizes, TOL, toys


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
