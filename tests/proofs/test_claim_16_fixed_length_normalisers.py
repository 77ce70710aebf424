"""Claim 16 (docs/claims.md): at fixed length the loss normaliser is only a constant factor.

Losses are the lab's `compute_loss` (the negative of the surrogate objective it maximises).
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.core.losses import compute_loss
from tests.proofs.proof_tools import seeds


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
