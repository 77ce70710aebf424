"""Claim 8 (docs/claims.md): the `rho - 1` part of k3 estimates zero.

Positions are independent given the prompt, so every expectation is an exact sum over the V
tokens of each position (`lab.exact.expected_kl_estimate`), computed with the lab's own k1/k2/k3.
"""

import torch
from hypothesis import assume, given

from lab.exact.enumeration import exact_kl, expected_kl_estimate
from lab.core.kl import k1, k3
from tests.proofs.proof_tools import close, kl_tables, TOL, toys


@given(toy=toys())
def test_claim_08_the_ratio_minus_one_term_estimates_zero_not_the_kl(toy):
    """E_{pi_theta}[pi_ref / pi_theta - 1] = 0: the term that some GRPO explainers write as the
    KL estimates zero; the -log rho term is what carries the KL (k3 = (rho - 1) + (-log rho)).

    Claim 8 (docs/claims.md); Schulman's "Approximating KL Divergence" (r - 1 has mean zero).
    Negative half by counterexample: where the KL is > 1e-4 at some position, "rho - 1 estimates
    the KL" fails there (a toy whose two policies are closer than that everywhere is set aside).
    """
    log_probs, ref_log_probs = kl_tables(toy)
    rho_minus_one = (log_probs.exp() * (torch.exp(ref_log_probs - log_probs) - 1)).sum(-1)
    assert close(rho_minus_one, torch.zeros_like(rho_minus_one))
    k3_minus_k1 = (log_probs.exp() * (k3(log_probs, ref_log_probs) - k1(log_probs, ref_log_probs))).sum(-1)
    assert close(k3_minus_k1, torch.zeros_like(k3_minus_k1))  # the same term, written with the lab's k3 and k1
    kl = exact_kl(log_probs, ref_log_probs)
    assert close(expected_kl_estimate("k1", log_probs, ref_log_probs), kl)
    assume(float(kl.max()) > TOL.differs)
    assert not close(rho_minus_one, kl)
