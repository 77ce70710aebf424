"""Deltas from a group's rewards (docs/task.md; claims 4 and 12 in docs/claims.md).

Every mode is checked against a plain-Python formula written here, per group:
    raw r_i (and gae's return r_i);  centered r_i - mean;  normalized (r_i - mean) / (std + eps);
    max r_i if r_i == max else 0;  loo r_i - mean of the other G - 1;
    batch (r_i - mean) / (std of every reward of the batch + eps) (`batch_formula`: it reads the whole batch).
"""

import math
import statistics

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lab.core.deltas import DeltaMode, compute_deltas
from lab.core.modes import NEEDS_GROUP

TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # float32 result against a float64 formula


def group_formula(group: list[float], mode: str, std_eps: float, unbiased: bool) -> list[float]:
    """The definition of one group's deltas (lab/core/deltas.py), on a list."""
    g = len(group)
    mean = sum(group) / g
    if mode in ("raw", "gae"):  # gae: the return, which the learned critic's GAE turns into advantages
        return list(group)
    if mode == "max":
        return [r if r == max(group) else 0.0 for r in group]
    if max(group) == min(group):  # a constant group carries no signal in a baseline mode
        return [0.0] * g
    if mode == "centered":
        return [r - mean for r in group]
    if mode == "normalized":
        std = statistics.stdev(group) if unbiased else statistics.pstdev(group)
        return [(r - mean) / (std + std_eps) for r in group]
    if mode == "loo":
        return [r - (sum(group) - r) / (g - 1) for r in group]
    raise AssertionError(mode)


def batch_formula(batch: list[list[float]], std_eps: float, unbiased: bool) -> list[list[float]]:
    """The definition of `--delta batch` on one batch of groups (TRL's scale_rewards="batch"): each group centred
    by its own mean, every group divided by the std of all the batch's rewards (0 in a constant group)."""
    everything = [r for group in batch for r in group]
    std = statistics.stdev(everything) if unbiased else statistics.pstdev(everything)
    return [[0.0] * len(group) if max(group) == min(group) else
            [(r - sum(group) / len(group)) / (std + std_eps) for r in group] for group in batch]


def test_worked_example_3_2_1():
    """Claim 12 (docs/claims.md): group rewards [3,2,1] give centered deltas [+1, 0, -1]; normalizing
    keeps the direction."""
    rewards = torch.tensor([[3.0, 2.0, 1.0]])
    assert compute_deltas(rewards, "centered").tolist() == [[1.0, 0.0, -1.0]]
    # Bessel-corrected std of [3,2,1] is 1 (the default); the population std is sqrt(2/3)
    torch.testing.assert_close(compute_deltas(rewards, "normalized"), torch.tensor([[1.0, 0.0, -1.0]]) / (1 + 1e-5))
    population = compute_deltas(rewards, "normalized", unbiased=False)
    torch.testing.assert_close(population, torch.tensor([[1.0, 0.0, -1.0]]) / (math.sqrt(2 / 3) + 1e-5))
    # loo: 3 - (2+1)/2, 2 - (3+1)/2, 1 - (3+2)/2
    assert compute_deltas(rewards, "loo").tolist() == [[1.5, 0.0, -1.5]]
    assert compute_deltas(rewards, "max").tolist() == [[3.0, 0.0, 0.0]]
    assert compute_deltas(rewards, "raw").tolist() == [[3.0, 2.0, 1.0]]


@st.composite
def reward_groups(draw):
    """rewards float[*lead batch trial] with trial >= 2; small half-integers so ties and constant groups occur."""
    lead = draw(st.sampled_from([(), (2,), (3,)]))
    shape = (*lead, draw(st.integers(1, 4)), draw(st.integers(2, 6)))
    values = draw(arrays(np.int64, shape, elements=st.integers(-4, 6)))
    return values.astype(np.float64) / 2


@pytest.mark.parametrize("mode", list(DeltaMode))
@given(rewards=reward_groups(), std_eps=st.sampled_from([1e-5, 1e-4, 1e-8, 0.0, 0.5]),
       unbiased=st.booleans())
def test_every_mode_matches_its_formula(mode, rewards, std_eps, unbiased):
    """Each mode equals its formula (lab/core/deltas.py) per group, for both std conventions and any eps."""
    out = compute_deltas(torch.tensor(rewards, dtype=torch.float32), mode, std_eps=std_eps, unbiased=unbiased)
    assert out.shape == rewards.shape and out.dtype == torch.float32
    if mode is DeltaMode.batch:  # one std per batch (the last two axes), each leading index its own
        batches = rewards.reshape(-1, *rewards.shape[-2:])
        if batches.shape[1] * batches.shape[2] < 2 or (std_eps == 0 and any(b.std() == 0 for b in batches)):
            return
        expected = np.array([batch_formula(b.tolist(), std_eps, unbiased) for b in batches]).reshape(rewards.shape)
        np.testing.assert_allclose(out.numpy(), expected, **TOLERANCE)
        return
    expected = np.array([group_formula(list(g), mode.value, std_eps, unbiased)
                         for g in rewards.reshape(-1, rewards.shape[-1])]).reshape(rewards.shape)
    np.testing.assert_allclose(out.numpy(), expected, **TOLERANCE)


def test_normalized_uses_the_bessel_corrected_std_and_1e5_by_default():
    """The documented defaults are torch's std (divides by G - 1) and eps = 1e-5."""
    rewards = torch.tensor([[0.0, 1.0, 5.0, 2.0]])
    by_default = compute_deltas(rewards, DeltaMode.normalized)
    stated = compute_deltas(rewards, DeltaMode.normalized, std_eps=1e-5, unbiased=True)
    assert torch.equal(by_default, stated)
    std = statistics.stdev([0.0, 1.0, 5.0, 2.0])
    torch.testing.assert_close(by_default, (rewards - 2.0) / (std + 1e-5))
    assert not torch.allclose(by_default, compute_deltas(rewards, "normalized", unbiased=False))
    assert not torch.allclose(by_default, compute_deltas(rewards, "normalized", std_eps=0.5))


def test_max_keeps_every_tied_maximum():
    """The lecture's max rule keeps all samples tied at the group maximum (docs/conventions.md)."""
    rewards = torch.tensor([[1.0, 3.0, 3.0, 2.0], [4.0, 4.0, 4.0, 0.0]])
    assert compute_deltas(rewards, "max").tolist() == [[0.0, 3.0, 3.0, 0.0], [4.0, 4.0, 4.0, 0.0]]


@given(rewards=reward_groups())
def test_centered_is_g_minus_one_over_g_times_leave_one_out(rewards):
    """Claim 4 (docs/claims.md): r_i - mean = (G-1)/G * (r_i - leave-one-out mean), group by group."""
    rewards = torch.tensor(rewards)
    g = rewards.shape[-1]
    torch.testing.assert_close(compute_deltas(rewards, "centered"),
                               (g - 1) / g * compute_deltas(rewards, "loo"))


@pytest.mark.parametrize("value", [0.1, 1 / 3, 5.0, -2.7, 0.0])
@pytest.mark.parametrize("group_size", [2, 3, 7, 10])
def test_a_constant_group_gives_exact_zeros_never_nan(value, group_size):
    """Equal rewards give exactly 0 in every baseline mode (no NaN from std 0), next to
    a normal group; raw and max pass the rewards through (every sample ties the max), also without NaN."""
    rewards = torch.stack([torch.full((group_size,), value), torch.arange(group_size, dtype=torch.float32)])
    for mode in DeltaMode:
        for std_eps in (1e-5, 0.0):
            out = compute_deltas(rewards, mode, std_eps=std_eps)
            assert not out.isnan().any(), mode
            if mode in NEEDS_GROUP:
                assert out[0].tolist() == [0.0] * group_size, mode  # exact, not merely close
                assert out[1].abs().sum() > 0
            else:
                assert torch.equal(out[0], rewards[0]), mode


@pytest.mark.parametrize("mode", sorted(NEEDS_GROUP, key=lambda m: m.value))
def test_a_group_of_one_is_an_error_for_baseline_modes(mode):
    """Centered, normalized and loo have no baseline with one response per prompt."""
    assert {DeltaMode.centered, DeltaMode.normalized, DeltaMode.loo, DeltaMode.batch} <= NEEDS_GROUP
    assert not NEEDS_GROUP & {DeltaMode.raw, DeltaMode.max, DeltaMode.gae}
    with pytest.raises(ValueError, match=f"{mode.value!r} needs a group of at least 2.*got group size 1"):
        compute_deltas(torch.tensor([[1.0], [2.0]]), mode)


@pytest.mark.parametrize("mode", ["raw", "max"])
def test_a_group_of_one_is_fine_for_raw_and_max(mode):
    rewards = torch.tensor([[1.0], [2.0]])
    assert torch.equal(compute_deltas(rewards, mode), rewards)


@pytest.mark.parametrize("mode", list(DeltaMode))
def test_mode_may_be_the_enum_or_its_name(mode):
    """`mode` is a DeltaMode member or its string name, with the same result."""
    rewards = torch.tensor([[3.0, 2.0, 1.0, 1.0], [0.0, 4.0, 2.0, 1.0]])
    assert torch.equal(compute_deltas(rewards, mode), compute_deltas(rewards, mode.value))
    assert callable(mode.entry.formula.resolve())  # the table's entry names a function that exists


def test_integer_rewards_give_float_deltas():
    out = compute_deltas(torch.tensor([[3, 2, 1]]), "centered")
    assert out.dtype.is_floating_point and out.tolist() == [[1.0, 0.0, -1.0]]


def test_unknown_mode_lists_the_choices():
    with pytest.raises(ValueError, match="unknown delta mode 'mean'; choose one of: raw, centered, normalized, max, loo"):
        compute_deltas(torch.tensor([[1.0, 2.0]]), "mean")


def test_batch_divides_by_the_batch_std_not_the_group_std():
    """`--delta batch` (TRL's scale_rewards="batch", PPO-Lite arXiv 2508.08221): two groups with the same
    centred rewards but different spreads elsewhere in the batch get one common divisor. Worked by hand: rewards
    [[0, 2], [0, 4]] have batch std (Bessel) sqrt(8/3) over the four values (mean 1.5: squares 2.25, 0.25, 2.25,
    6.25, sum 11, / 3), so the first group's deltas are -+1 / sqrt(11/3). Mutant tried: the group's std in place
    of the batch's (the `normalized` mode) gives -+1 / sqrt(2) and fails."""
    rewards = torch.tensor([[0.0, 2.0], [0.0, 4.0]], dtype=torch.float64)
    out = compute_deltas(rewards, "batch", std_eps=0.0)
    std = math.sqrt(11 / 3)
    torch.testing.assert_close(out, torch.tensor([[-1.0, 1.0], [-2.0, 2.0]], dtype=torch.float64) / std)
    assert not torch.allclose(out, compute_deltas(rewards, "normalized", std_eps=0.0))
