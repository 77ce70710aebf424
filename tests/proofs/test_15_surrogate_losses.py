"""Claims 15-16 (docs/claims.md): the clipped surrogate's bound, and why loss normalisers cannot matter here.

Losses are the lab's `compute_loss` (the negative of the surrogate objective it maximises).
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.core.losses import compute_loss

seeds = st.integers(0, 2**31 - 1)


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


@given(seed=seeds, length=st.integers(1, 4), max_length=st.integers(4, 8))
def test_claim_16_at_fixed_length_token_mean_sequence_mean_and_constant_divisor_differ_by_a_constant(
        seed, length, max_length):
    """With every response of the same length L, the token mean (DAPO, TRL), the mean over
    sequences of per-sequence token means (GRPO) and per-sequence sums over a constant divisor
    (Dr. GRPO's MAX_LEN) differ only by constant factors, so they have parallel gradients.

    Claim 16 (docs/claims.md); Dr. GRPO (Liu et al. 2025) on length normalisation. Mutant (the
    reason it matters elsewhere): with unequal lengths the token mean and the sequence mean are no
    longer proportional; a counterexample is built.
    """
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4, length, generator=generator, dtype=torch.float64).requires_grad_()  # batch trial pos
    deltas = torch.randn(3, 4, generator=generator, dtype=torch.float64)
    token_mean = compute_loss(x, deltas, "naive")  # the lab's normaliser
    per_token = -(x * deltas.unsqueeze(-1))
    sequence_mean = per_token.mean(dim=-1).mean()
    constant_divisor = per_token.sum(dim=-1).sum() / (x.shape[0] * x.shape[1] * max_length)
    assert torch.allclose(sequence_mean, token_mean, rtol=1e-12, atol=1e-14)
    assert torch.allclose(constant_divisor, token_mean * length / max_length, rtol=1e-12, atol=1e-14)
    grads = [torch.autograd.grad(v, x, retain_graph=True)[0] for v in (token_mean, sequence_mean, constant_divisor)]
    assert torch.allclose(grads[1], grads[0], rtol=1e-12, atol=0)
    assert torch.allclose(grads[2], grads[0] * length / max_length, rtol=1e-12, atol=0)

    # unequal lengths: sequence 0 has 1 token, sequence 1 has 3 (mask); the ratio depends on the data
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)

    def ratio(values):
        token = (values * mask).sum() / mask.sum()
        sequence = ((values * mask).sum(-1) / mask.sum(-1)).mean()
        return float(token / sequence)

    assert abs(ratio(torch.tensor([[1.0, 0, 0], [1, 1, 1]])) - ratio(torch.tensor([[2.0, 0, 0], [1, 1, 1]]))) > 0.01
