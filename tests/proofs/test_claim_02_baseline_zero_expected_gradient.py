"""Claim 2 (docs/claims.md): a baseline that ignores the output changes nothing in expectation."""

import torch
from einops import einsum
from hypothesis import given
from hypothesis import strategies as st

from lab.exact.enumeration import score_matrix
from tests.proofs.proof_tools import assume_not_degenerate, close, toys


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
