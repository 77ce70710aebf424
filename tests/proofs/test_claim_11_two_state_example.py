"""Claim 11 (docs/claims.md): the lecture's two-state example.

Every number is computed here with the lab's `compute_deltas` and torch; the asserts compare the
computed values with the figures the sources report, they do not supply them.
"""

import torch

from lab.core.deltas import compute_deltas


TWO_STATE_REWARDS = [[11.0, 9.0], [0.0, 2.0]]
"""The lecture's toy: state s1 has rewards 11 and 9, state s2 has 0 and 2 (state, trial)."""


def test_claim_11_the_two_state_baselines_cut_the_spread_from_about_5_3_to_about_1_2():
    """Rewards s1: 11, 9 and s2: 0, 2; per-state baselines 10 and 1; the std of the update signal
    falls from about 5.3 to about 1.2 (variance 28.3 to 1.33, the lecture printed the std and
    called it the variance).

    Claim 11 (docs/claims.md), the CS336 lecture 17 notes' two-state baseline example. Mutant: the
    population std (the GRPO chapter's) gives 4.6 and 1.0, which are not the lecture's figures, so
    the lecture used torch's Bessel-corrected std.
    """
    rewards = torch.tensor(TWO_STATE_REWARDS, dtype=torch.float64)
    centered = compute_deltas(rewards, "centered")
    baselines = rewards - centered
    assert torch.equal(baselines, torch.tensor([[10.0, 10.0], [1.0, 1.0]], dtype=torch.float64))

    before, after = rewards.flatten().std(), centered.flatten().std()
    assert round(float(before), 1) == 5.3 and round(float(after), 1) == 1.2
    assert round(float(before**2), 1) == 28.3 and round(float(after**2), 2) == 1.33
    assert round(float(before), 1) != round(float(before**2), 1)  # a std is not a variance

    population = rewards.flatten().std(correction=0), centered.flatten().std(correction=0)
    assert (round(float(population[0]), 1), round(float(population[1]), 1)) != (5.3, 1.2)
