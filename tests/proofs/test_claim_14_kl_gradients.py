"""Claim 14 (docs/claims.md): as losses on current samples, k1, k2, k3 have different gradients.

"On samples from the current policy, no gradient through the sampling" is the expectation
sum_v pi_theta(v).detach() * grad k(v), which `lab.exact.expected_kl_estimate` gives with
`sample_log_probs=log_probs.detach()`; the KLs are exact sums (`lab.exact.exact_kl`).
"""

from hypothesis import given
from tests.proofs.proof_tools import close, make_toy, toys

from lab.exact.enumeration import exact_kl, expected_kl_estimate, flat_grad, position_log_probs


@given(toy=toys())
def test_claim_14_kl_estimators_as_losses_k1_has_no_gradient_k2_grad_kl_theta_ref_k3_grad_kl_ref_theta(toy):
    """Used as a loss on samples from the current policy, in expectation k1's gradient is zero,
    k2's is grad KL(pi_theta || pi_ref), and k3's is grad KL(pi_ref || pi_theta), the other
    direction (reference first: with pi_theta as the model, the forward, mass-covering KL),
    although k3's *value* is the unbiased estimate of KL(pi_theta || pi_ref).

    Claim 14 (docs/claims.md; derived and checked exactly here). Mutant: "k3's gradient is
    grad KL(pi_theta || pi_ref)" fails the same check (the two KL gradients differ on every drawn toy).
    """
    reference = make_toy(toy.generator.initial_seed() + 1, toy.vocab_size, toy.length,
                         toy.prompts.shape[1], dim=toy.policy.dim)
    log_probs = position_log_probs(toy.policy, toy.prompts)  # float[batch pos vocab], with gradient
    ref_log_probs = position_log_probs(reference.policy, toy.prompts).detach()
    samples = log_probs.detach()  # tokens drawn from the current policy, no gradient through drawing

    def loss_gradient(estimator):
        return flat_grad(expected_kl_estimate(estimator, log_probs, ref_log_probs, samples).sum(), toy.policy)

    grad_kl_theta_ref = flat_grad(exact_kl(log_probs, ref_log_probs).sum(), toy.policy)  # KL(pi_theta || pi_ref)
    grad_kl_ref_theta = flat_grad(exact_kl(ref_log_probs, log_probs).sum(), toy.policy)  # KL(pi_ref || pi_theta)
    assert close(loss_gradient("k1"), 0 * grad_kl_theta_ref)
    assert close(loss_gradient("k2"), grad_kl_theta_ref)
    assert close(loss_gradient("k3"), grad_kl_ref_theta)
    assert close(expected_kl_estimate("k3", log_probs, ref_log_probs, samples), exact_kl(log_probs, ref_log_probs))

    assert not close(loss_gradient("k3"), grad_kl_theta_ref)
