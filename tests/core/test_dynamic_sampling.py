"""Dynamic sampling's filter (lab.core.dynamic_sampling; DAPO arXiv:2503.14476 section 3.2, verl filter_groups)."""

import torch

from lab.core.dynamic_sampling import has_signal, needs_redraw, replace_groups


def test_a_group_has_signal_iff_its_rewards_are_not_all_equal():
    """Groups [1 1 1], [0 0 0], [0 1 1], [0.5 0.5 0.50001]: only the last two have signal (any difference counts).
    Mutants tried: std > 0.1 as a threshold (misses the last), any reward > 0 (takes the first)."""
    rewards = torch.tensor([[1.0, 1, 1], [0, 0, 0], [0, 1, 1], [0.5, 0.5, 0.50001]], dtype=torch.float64)
    assert has_signal(rewards).tolist() == [False, False, True, True]


def test_a_group_without_signal_is_redrawn_until_the_cap():
    """needs_redraw = no signal and draws < cap: with cap 3, a flat group drawn once or twice is redrawn, a flat one
    drawn 3 times is kept, a group with signal never redrawn. Mutant tried: draws <= cap (a fourth draw)."""
    rewards = torch.tensor([[1.0, 1], [1.0, 1], [1.0, 1], [0.0, 1]])
    draws = torch.tensor([1, 2, 3, 1])
    assert needs_redraw(rewards, draws, 3).tolist() == [True, True, False, False]


def test_replace_groups_swaps_whole_groups_only_where_redrawn():
    """Each prompt's whole group (trial and pos) comes from the fresh draw where it is redrawn, else stays: checked
    on int[run batch trial pos] responses with the flag per [run batch]. Mutant tried: flag broadcast on trial."""
    kept = torch.zeros(2, 3, 2, 4, dtype=torch.long)
    fresh = torch.ones(2, 3, 2, 4, dtype=torch.long)
    redraw = torch.tensor([[True, False, False], [False, False, True]])
    out = replace_groups(kept, fresh, redraw)
    assert out.sum(dim=(-1, -2)).tolist() == [[8, 0, 0], [0, 0, 8]]
