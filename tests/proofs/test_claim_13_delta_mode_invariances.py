"""Claim 13 (docs/claims.md): what each delta mode ignores.

Every number is computed here with the lab's `compute_deltas` and torch; the asserts compare the
computed values with the figures the sources report, they do not supply them.
"""

import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from lab.core.deltas import compute_deltas


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
