"""Claim 7 (docs/claims.md): on stale samples k3 is biased; importance weights repair it.

Positions are independent given the prompt, so every expectation is an exact sum over the V
tokens of each position (`lab.exact.expected_kl_estimate`), computed with the lab's own k1/k2/k3.
"""

import torch
from hypothesis import assume, given

from lab.exact.enumeration import exact_kl, expected_kl_estimate
from lab.core.kl import k3
from tests.proofs.proof_tools import close, kl_tables, TOL, toys


@given(toy=toys())
def test_claim_07_k3_on_stale_samples_is_biased_and_importance_weights_restore_it(toy):
    """With tokens sampled from pi_old != pi_theta, E_old[k3] is not KL(pi_theta || pi_ref);
    weighting each sample by pi_theta / pi_old restores it exactly.

    Claim 7 (docs/claims.md), the GRPO textbook chapter's old-sample boundary. The weighted
    estimate is checked on every drawn toy. The bias is shown by counterexamples: a toy whose stale
    expectation happens to lie within 1e-4 of the KL at every position is set aside (`assume`;
    rare, and were it the rule Hypothesis would fail the test as unsatisfiable); on the others,
    the mutant weight pi_old / pi_theta fails too.
    """
    log_probs, ref_log_probs = kl_tables(toy)
    _, old_log_probs = kl_tables(toy, seed_offset=2)
    kl = exact_kl(log_probs, ref_log_probs)
    weighted = expected_kl_estimate("k3", log_probs, ref_log_probs, old_log_probs, importance_weighted=True)
    assert close(weighted, kl)

    stale = expected_kl_estimate("k3", log_probs, ref_log_probs, sample_log_probs=old_log_probs)
    assume(float((stale - kl).abs().max()) > TOL.differs)
    wrong_weight = (old_log_probs.exp() * torch.exp(old_log_probs - log_probs) * k3(log_probs, ref_log_probs)).sum(-1)
    assert not close(wrong_weight, kl)
