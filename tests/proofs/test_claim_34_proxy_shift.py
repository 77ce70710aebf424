"""Claim 34 (docs/claims.md): a proxy reward that is the gold reward plus a constant per prompt.

A reward model is identified only up to a constant per prompt (claim 33). With proxy = gold + c(x):

- the group modes `centered`, `normalized` and `loo` subtract a group statistic, so their deltas, and
  with them every sampled update, are exactly the gold reward's (`lab.core.deltas`);
- `raw` deltas shift by c(x): every sampled update changes (by c(x) times the group's summed score),
  though not its expectation, since E[grad log pi] = 0 (claim 2): raw's variance depends on c(x).

Checked on random groups in float64: the group modes' deltas agree to rounding, raw's differ by c(x).
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.core.deltas import compute_deltas

cases = dict(seed=st.integers(0, 2**31 - 1), group=st.integers(2, 6), prompts=st.integers(1, 4))


def rewards_and_shift(seed, prompts, group):
    g = torch.Generator().manual_seed(seed)
    gold = torch.randint(0, 5, (prompts, group), generator=g).double()
    shift = (torch.rand(prompts, 1, generator=g, dtype=torch.float64) - 0.5) * 20 + 1  # never 0 at 1e-9
    return gold, gold + shift, shift


@given(**cases)
def test_claim_34_group_modes_ignore_a_per_prompt_constant_and_raw_does_not(seed, group, prompts):
    """centered, normalized and loo deltas of gold + c(x) equal gold's to 1e-12; raw's differ by c(x).
    Mutant: the raw mode, held to the same equality, fails on every group."""
    gold, proxy, shift = rewards_and_shift(seed, prompts, group)
    for mode in ("centered", "normalized", "loo"):
        assert torch.allclose(compute_deltas(proxy, mode), compute_deltas(gold, mode), rtol=0, atol=1e-12), mode
    raw_gap = compute_deltas(proxy, "raw") - compute_deltas(gold, "raw")
    assert torch.allclose(raw_gap, shift.expand_as(raw_gap), rtol=0, atol=1e-12)
    assert not torch.allclose(compute_deltas(proxy, "raw"), compute_deltas(gold, "raw"), rtol=0, atol=1e-6)
