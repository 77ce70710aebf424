"""Claims 11-13 (docs/claims.md): the sources' worked examples and the invariances of the delta modes.

Every number is computed here with the lab's `compute_deltas` and torch; the asserts compare the
computed values with the figures the sources report, they do not supply them.
"""

import torch
from hypothesis import assume, given
from hypothesis import strategies as st

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


groups = st.lists(st.lists(st.integers(0, 5), min_size=2, max_size=5), min_size=1, max_size=3).filter(
    lambda rows: len({len(r) for r in rows}) == 1)
"""Reward groups float[batch trial] on an integer grid (so equal rewards tie exactly)."""


@given(rows=groups, shift=st.floats(-100, 100), scale=st.floats(0.1, 10))
def test_claim_13_centered_and_normalized_deltas_ignore_a_shift_and_normalized_also_a_positive_scale(
        rows, shift, scale):
    """Adding a constant to every reward of a group leaves centered (and leave-one-out) and
    normalized deltas unchanged; multiplying by a positive constant leaves normalized ones
    unchanged (exactly with std_eps = 0; the default eps changes them by O(eps / std)). Raw
    deltas change under both, centered ones under scaling.

    Claim 13 (docs/claims.md), the GRPO textbook chapter. The invariance check is shown to reject raw deltas
    (shift) and centered deltas (scale): the mutant halves of the claim.
    """
    r = torch.tensor(rows, dtype=torch.float64)
    tight = dict(rtol=1e-9, atol=1e-9)
    for mode in ("centered", "loo", "normalized"):
        assert torch.allclose(compute_deltas(r + shift, mode), compute_deltas(r, mode), **tight)
    exact_std = dict(std_eps=0.0)
    assert torch.allclose(compute_deltas(scale * r, "normalized", **exact_std),
                          compute_deltas(r, "normalized", **exact_std), **tight)
    # with the lecture's eps the change is bounded by eps / std (std >= 1/2 on this integer grid)
    assert torch.allclose(compute_deltas(scale * r, "normalized"), compute_deltas(r, "normalized"),
                          rtol=0, atol=1e-3)

    assume(abs(shift) > 1e-3)
    assert not torch.allclose(compute_deltas(r + shift, "raw"), compute_deltas(r, "raw"), **tight)
    varied = bool((r.amax(-1) > r.amin(-1)).any())
    if varied and abs(scale - 1) > 1e-3:
        assert not torch.allclose(compute_deltas(scale * r, "centered"), compute_deltas(r, "centered"), **tight)
