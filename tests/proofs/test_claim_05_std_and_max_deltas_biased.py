"""Claim 5 (docs/claims.md): dividing by the group std is a heuristic, and so is keeping only the maximum.

The per-group estimator is g = (1/G) sum_i d_i grad log pi(o_i | q); `lab.exact.estimators` gives its
exact expectation by enumerating groups (method `values`: every multiset of the group's rewards,
deltas from the lab's own `compute_deltas`), so "unbiased" and "biased" are exact statements.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.core.deltas import compute_deltas
from tests.proofs.proof_tools import angle_deg, expected_gradient, make_toy


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
