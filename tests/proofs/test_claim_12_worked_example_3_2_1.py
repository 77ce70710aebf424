"""Claim 12 (docs/claims.md): the worked example [3, 2, 1].

Every number is computed here with the lab's `compute_deltas` and torch; the asserts compare the
computed values with the figures the sources report, they do not supply them.
"""

import torch

from lab.core.deltas import compute_deltas


def test_claim_12_rewards_3_2_1_give_centered_deltas_plus_1_0_minus_1_and_normalizing_keeps_direction():
    """A group with rewards [3, 2, 1] has mean 2, so centered deltas are [+1, 0, -1]; normalizing
    divides them by a positive number (std 1 plus eps), which rescales them and keeps the direction.

    Claim 12 (docs/claims.md), the CS336 lecture 17 notes' worked example. Mutants: raw rewards are not
    [+1, 0, -1]; max deltas [3, 0, 0] point elsewhere.
    """
    rewards = torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)
    centered = compute_deltas(rewards, "centered")
    assert torch.equal(centered, torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64))
    normalized = compute_deltas(rewards, "normalized")
    scale = normalized[0] / centered[0]
    assert float(scale) > 0
    assert torch.allclose(normalized, scale * centered, rtol=1e-12, atol=0)
    assert torch.allclose(scale, torch.tensor(1 / (1 + 1e-5), dtype=torch.float64), rtol=1e-12)

    assert not torch.equal(compute_deltas(rewards, "raw"), centered)
    max_deltas = compute_deltas(rewards, "max")
    assert float(torch.nn.functional.cosine_similarity(max_deltas, centered, dim=0)) < 0.99
