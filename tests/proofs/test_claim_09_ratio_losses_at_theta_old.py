"""Claim 9 (docs/claims.md): at theta_old the ratio losses are the naive loss; outside the band a token is silent.

The losses are the lab's `compute_loss`; the samples come from the lab's `sample_responses`.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.exact.enumeration import flat_grad
from lab.core.losses import compute_loss, ratios
from tests.proofs.proof_tools import close, sampled_batch, seeds, toys


@given(toy=toys(), G=st.integers(2, 5))
def test_claim_09_at_theta_old_the_ratio_losses_have_the_naive_gradient(toy, G):
    """At theta = theta_old the ratio is 1 and the unclipped and clipped losses have exactly the
    naive loss's gradient.

    Claim 9 (docs/claims.md; first half), the GRPO textbook chapter. Mutant: a sequence-level ratio
    exp(sum_q (l_q - l_old_q)) broadcast to every token has L times the gradient, and fails.
    """
    log_probs, deltas = sampled_batch(toy, G)
    old = log_probs.detach()
    assert torch.equal(ratios(log_probs, old), torch.ones_like(old))
    naive = flat_grad(compute_loss(log_probs, deltas, "naive"), toy.policy)
    for mode in ("unclipped", "clipped"):
        gradient = flat_grad(compute_loss(log_probs, deltas, mode, old_log_probs=old), toy.policy)
        assert close(gradient, naive)

    if toy.length > 1 and float(naive.norm()) > 1e-6:
        sequence_ratio = torch.exp((log_probs - old).sum(-1, keepdim=True)).expand_as(log_probs)
        mutant = flat_grad(-(sequence_ratio * deltas.unsqueeze(-1)).mean(), toy.policy)
        assert not close(mutant, naive)


@given(seed=seeds, clip_eps=st.sampled_from([0.01, 0.1, 0.2]))
def test_claim_09_outside_the_band_on_the_side_its_delta_pushes_a_token_has_no_gradient(seed, clip_eps):
    """With theta != theta_old, a token whose ratio is outside [1-eps, 1+eps] on the side its delta
    pushes toward (rho > 1+eps with delta > 0, rho < 1-eps with delta < 0) contributes no gradient
    to the clipped loss; every other token keeps its gradient.

    Claim 9 (docs/claims.md; second half), the GRPO textbook chapter. Mutant: clipping the ratio without the min,
    -clip(rho) * delta, also silences tokens pushed back toward the band, and fails.
    """
    generator = torch.Generator().manual_seed(seed)
    shape = (3, 4, 2)  # batch trial pos
    old = torch.randn(shape, generator=generator, dtype=torch.float64) - 1
    log_probs = (old + 3 * clip_eps * torch.randn(shape, generator=generator, dtype=torch.float64)).requires_grad_()
    deltas = torch.randn(shape[:-1], generator=generator, dtype=torch.float64)
    (gradient,) = torch.autograd.grad(compute_loss(log_probs, deltas, "clipped", old, clip_eps), log_probs)

    rho, d = torch.exp(log_probs.detach() - old), deltas.unsqueeze(-1).expand(shape)
    silenced = ((rho > 1 + clip_eps) & (d > 0)) | ((rho < 1 - clip_eps) & (d < 0))
    assert bool((gradient[silenced] == 0).all())
    assert bool((gradient[~silenced] != 0).all())

    def clip_only(log_probs):
        clipped = torch.clamp(torch.exp(log_probs - old), 1 - clip_eps, 1 + clip_eps)
        return -(clipped * deltas.unsqueeze(-1)).mean()

    (mutant,) = torch.autograd.grad(clip_only(log_probs), log_probs)
    pushed_back = (rho - 1).abs() > clip_eps
    if bool((pushed_back & ~silenced).any()):
        assert not bool((mutant[~silenced] != 0).all())
