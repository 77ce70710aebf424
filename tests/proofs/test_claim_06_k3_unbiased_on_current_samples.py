"""Claim 6 (docs/claims.md): k3 is non-negative and, on current samples, an unbiased estimate of the KL.

Positions are independent given the prompt, so every expectation is an exact sum over the V
tokens of each position (`lab.exact.expected_kl_estimate`), computed with the lab's own k1/k2/k3.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.exact.enumeration import exact_kl, expected_kl_estimate
from lab.core.kl import k1, k3
from tests.proofs.proof_tools import close, kl_tables, toys


@given(log_rho=st.floats(-30, 30))
def test_claim_06_k3_is_nonnegative_and_zero_only_at_ratio_one(log_rho):
    """f(rho) = rho - log(rho) - 1 >= 0, with equality iff rho = 1.

    Claim 6 (docs/claims.md); the GRPO textbook chapter, Schulman's "Approximating KL Divergence".
    Checked on `lab.core.kl.k3` at log rho = log pi_ref - log pi_theta. Mutant: k1 = -log rho fails
    non-negativity for rho > 1.
    """
    log_probs, ref_log_probs = torch.zeros((), dtype=torch.float64), torch.tensor(log_rho, dtype=torch.float64)
    value = float(k3(log_probs, ref_log_probs))
    assert value >= 0
    assert (value == 0) == (log_rho == 0) or abs(log_rho) < 1e-7  # f ~ log_rho^2 / 2 underflows below
    if log_rho > 0:
        assert float(k1(log_probs, ref_log_probs)) < 0


@given(toy=toys())
def test_claim_06_k3_and_k1_are_unbiased_for_the_kl_on_current_samples(toy):
    """With tokens sampled from the current policy, E[rho] = 1 and E[k3] = KL(pi_theta || pi_ref)
    exactly; the naive k1 = -log rho is unbiased too, but takes negative values.

    Claim 6 (docs/claims.md); the GRPO textbook chapter, Schulman's "Approximating KL Divergence".
    Mutants rejected by the same check: k2 (biased), and k3 with the ratio inverted
    (rho = pi_theta / pi_ref), whose expectation adds a chi-square term.
    """
    log_probs, ref_log_probs = kl_tables(toy)
    kl = exact_kl(log_probs, ref_log_probs)  # float[batch pos]
    assert close((log_probs.exp() * torch.exp(ref_log_probs - log_probs)).sum(-1), torch.ones_like(kl))
    assert close(expected_kl_estimate("k3", log_probs, ref_log_probs), kl)
    assert close(expected_kl_estimate("k1", log_probs, ref_log_probs), kl)
    assert bool((k1(log_probs, ref_log_probs).amin(dim=-1) < 0).all())  # some token below zero at every position

    assert not close(expected_kl_estimate("k2", log_probs, ref_log_probs), kl)
    inverted = (log_probs.exp() * k3(ref_log_probs, log_probs)).sum(-1)
    assert not close(inverted, kl)
