"""Claim 3 (docs/claims.md): the leave-one-out baseline is unbiased.

The per-group estimator is g = (1/G) sum_i d_i grad log pi(o_i | q); `lab.exact.estimators` gives its
exact expectation by enumerating groups (method `values`: every multiset of the group's rewards,
deltas from the lab's own `compute_deltas`), so "unbiased" and "biased" are exact statements.
"""

from hypothesis import assume, given

from tests.proofs.proof_tools import close, expected_gradient, group_sizes, TOL, toys


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
