"""Claim 39 (docs/claims.md): of the ratios a loss can weigh old samples by, only the sequence's likelihood ratio
pi_theta(y) / pi_old(y) (the product of its token ratios) makes their expected gradient the on-policy gradient;
token ratios and GSPO's geometric mean s_i = exp(mean_t log rho_t) are biased once theta leaves theta_old. Under
the clip (eps 0.2), GSPO's sequence ratio lowers the update's relative variance, tr Cov[grad L(y)] / ||E grad
L||^2 under pi_old, below the token ratio's, after S = 10 steps of lr 1 on one batch from each of 5 random pi_old
(its absolute variance is higher there: it silences fewer tokens).

Source: GSPO (Zheng et al., arXiv 2507.18071), sections 3-4 (token-level importance weights are ill-posed and
noisy; a sequence-level ratio); importance sampling's identity. Decided exactly on the toy by enumeration; the
variance comparison is the toy's, from these pi_old, not a theorem.
"""

import pytest
import torch

from tests.proofs.proof_tools import LENS_SEEDS as SEEDS, lecture_lens

from lab.exact.surrogate_lens import (expected_gradient, inner_steps, on_policy_gradient, per_sample_variance,
                                      sequence_probs, token_log_probs)


@pytest.mark.parametrize("seed", SEEDS)
def test_claim_39_only_the_sequence_likelihood_ratio_recovers_the_on_policy_gradient(seed):
    """-sum_y pi_old(y) (pi_theta(y) / pi_old(y)) A(y) grad log pi_theta(y) / L = g_on(theta) to 1e-12 at PPO's
    theta_S; the unclipped loss with token ratios and with GSPO's s_i miss it by over 1%. Mutant: the token
    ratios' gradient held to the same equality fails."""
    old, responses, advantages = lecture_lens(seed)
    theta_s = inner_steps(old, advantages, "clipped", responses, 1.0, 10, clip_eps=0.2)
    theta = theta_s.clone().requires_grad_(True)
    weights = (sequence_probs(theta_s, responses) / sequence_probs(old, responses)).detach()
    value = -(sequence_probs(old, responses) * weights * advantages
              * token_log_probs(theta, responses).sum(-1)).sum() / responses.shape[1]
    (weighted,) = torch.autograd.grad(value, theta)
    g_on = on_policy_gradient(theta_s, advantages, responses)
    torch.testing.assert_close(weighted, g_on, rtol=0, atol=1e-12)
    for level in ("token", "sequence"):
        g = expected_gradient(theta_s, old, advantages, "unclipped", responses, importance_sampling_level=level)
        assert (g - g_on).norm() / g_on.norm() > 0.01


@pytest.mark.parametrize("seed", SEEDS)
def test_claim_39_under_the_clip_the_sequence_ratio_lowers_the_relative_variance(seed):
    """At PPO's theta_S: relative variance with s_i below that with token ratios; absolute variance above. Mutant:
    'the sequence ratio lowers the absolute variance under the clip' fails from every pi_old here."""
    old, responses, advantages = lecture_lens(seed)
    theta = inner_steps(old, advantages, "clipped", responses, 1.0, 10, clip_eps=0.2)
    variance, relative = {}, {}
    for level in ("token", "sequence"):
        settings = dict(clip_eps=0.2, importance_sampling_level=level)
        variance[level] = per_sample_variance(theta, old, advantages, "clipped", responses, **settings).sum()
        mean = expected_gradient(theta, old, advantages, "clipped", responses, **settings)
        relative[level] = variance[level] / (mean ** 2).sum()
    assert relative["sequence"] < relative["token"]
    assert variance["sequence"] > variance["token"]
