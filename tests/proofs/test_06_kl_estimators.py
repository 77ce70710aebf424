"""Claims 6-8 (docs/claims.md): what the per-token KL estimators k1, k2, k3 estimate, and when.

Positions are independent given the prompt, so every expectation is an exact sum over the V
tokens of each position (`lab.exact.expected_kl_estimate`), computed with the lab's own k1/k2/k3.
"""

import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from proof_tools import TOL, close, make_toy, toys

from lab.exact.enumeration import exact_kl, expected_kl_estimate, position_log_probs
from lab.core.kl import k1, k3


def tables(toy, seed_offset=1):
    """log pi_theta (the toy's policy) and log pi_ref (another policy from a shifted seed): float[batch pos vocab]."""
    other = make_toy(int(torch.randint(2**31 - 1, (), generator=toy.generator)) + seed_offset,
                     toy.vocab_size, toy.length, toy.prompts.shape[1], dim=toy.policy.dim)
    return (position_log_probs(toy.policy, toy.prompts).detach(),
            position_log_probs(other.policy, toy.prompts).detach())


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
    log_probs, ref_log_probs = tables(toy)
    kl = exact_kl(log_probs, ref_log_probs)  # float[batch pos]
    assert close((log_probs.exp() * torch.exp(ref_log_probs - log_probs)).sum(-1), torch.ones_like(kl))
    assert close(expected_kl_estimate("k3", log_probs, ref_log_probs), kl)
    assert close(expected_kl_estimate("k1", log_probs, ref_log_probs), kl)
    assert bool((k1(log_probs, ref_log_probs).amin(dim=-1) < 0).all())  # some token below zero at every position

    assert not close(expected_kl_estimate("k2", log_probs, ref_log_probs), kl)
    inverted = (log_probs.exp() * k3(ref_log_probs, log_probs)).sum(-1)
    assert not close(inverted, kl)


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
    log_probs, ref_log_probs = tables(toy)
    _, old_log_probs = tables(toy, seed_offset=2)
    kl = exact_kl(log_probs, ref_log_probs)
    weighted = expected_kl_estimate("k3", log_probs, ref_log_probs, old_log_probs, importance_weighted=True)
    assert close(weighted, kl)

    stale = expected_kl_estimate("k3", log_probs, ref_log_probs, sample_log_probs=old_log_probs)
    assume(float((stale - kl).abs().max()) > TOL.differs)
    wrong_weight = (old_log_probs.exp() * torch.exp(old_log_probs - log_probs) * k3(log_probs, ref_log_probs)).sum(-1)
    assert not close(wrong_weight, kl)


@given(toy=toys())
def test_claim_08_the_ratio_minus_one_term_estimates_zero_not_the_kl(toy):
    """E_{pi_theta}[pi_ref / pi_theta - 1] = 0: the term that some GRPO explainers write as the
    KL estimates zero; the -log rho term is what carries the KL (k3 = (rho - 1) + (-log rho)).

    Claim 8 (docs/claims.md); Schulman's "Approximating KL Divergence" (r - 1 has mean zero).
    Negative half by counterexample: where the KL is > 1e-4 at some position, "rho - 1 estimates
    the KL" fails there (a toy whose two policies are closer than that everywhere is set aside).
    """
    log_probs, ref_log_probs = tables(toy)
    rho_minus_one = (log_probs.exp() * (torch.exp(ref_log_probs - log_probs) - 1)).sum(-1)
    assert close(rho_minus_one, torch.zeros_like(rho_minus_one))
    k3_minus_k1 = (log_probs.exp() * (k3(log_probs, ref_log_probs) - k1(log_probs, ref_log_probs))).sum(-1)
    assert close(k3_minus_k1, torch.zeros_like(k3_minus_k1))  # the same term, written with the lab's k3 and k1
    kl = exact_kl(log_probs, ref_log_probs)
    assert close(expected_kl_estimate("k1", log_probs, ref_log_probs), kl)
    assume(float(kl.max()) > TOL.differs)
    assert not close(rho_minus_one, kl)
