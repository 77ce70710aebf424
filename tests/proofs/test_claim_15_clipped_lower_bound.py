"""Claim 15 (docs/claims.md): the clipped surrogate is a lower bound of the unclipped one.

Losses are the lab's `compute_loss` (the negative of the surrogate objective it maximises).
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.core.losses import compute_loss
from tests.proofs.proof_tools import seeds


def token_losses(mode, log_probs, old_log_probs, deltas, clip_eps):
    """Per-token losses float[batch trial pos]: each token as its own leading index of `compute_loss`."""
    shape = log_probs.shape
    per_token = compute_loss(log_probs.reshape(*shape, 1, 1, 1), deltas.unsqueeze(-1).expand(shape).reshape(
        *shape, 1, 1), mode, old_log_probs.reshape(*shape, 1, 1, 1), clip_eps)
    return per_token


@given(seed=seeds, clip_eps=st.sampled_from([0.01, 0.1, 0.2]), spread=st.sampled_from([0.005, 0.05, 0.5]))
def test_claim_15_the_clipped_surrogate_is_never_above_the_unclipped_one_and_equal_inside_the_band(
        seed, clip_eps, spread):
    """min(rho d, clip(rho, 1-eps, 1+eps) d) <= rho d for every token, with equality whenever
    rho lies in [1-eps, 1+eps]; so the clipped objective is a lower bound of the unclipped one.

    Claim 15 (docs/claims.md); the PPO clip of the GRPO textbook chapter and of Schulman et al. 2017. Mutant: taking the
    max instead of the min breaks the bound on tokens outside the band that move back toward it.
    """
    generator = torch.Generator().manual_seed(seed)
    shape = (3, 4, 2)  # batch trial pos
    old = torch.randn(shape, generator=generator, dtype=torch.float64) - 1
    log_probs = old + spread * torch.randn(shape, generator=generator, dtype=torch.float64)
    deltas = torch.randn(shape[:-1], generator=generator, dtype=torch.float64)
    clipped = -token_losses("clipped", log_probs, old, deltas, clip_eps)  # surrogate objective per token
    unclipped = -token_losses("unclipped", log_probs, old, deltas, clip_eps)
    assert bool((clipped <= unclipped).all())
    inside = (torch.exp(log_probs - old) - 1).abs() <= clip_eps
    assert torch.equal(clipped[inside], unclipped[inside])
    assert float(compute_loss(log_probs, deltas, "clipped", old, clip_eps)) >= float(
        compute_loss(log_probs, deltas, "unclipped", old, clip_eps))

    rho, d = torch.exp(log_probs - old), deltas.unsqueeze(-1)
    mutant = torch.maximum(rho * d, torch.clamp(rho, 1 - clip_eps, 1 + clip_eps) * d)
    pushed_back = ~inside & (clipped == unclipped)  # outside the band, moving back toward it
    if bool(pushed_back.any()):
        assert not bool((mutant <= unclipped).all())
