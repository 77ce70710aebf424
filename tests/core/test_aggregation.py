"""Loss aggregation modes (lab/core/aggregation.py docstring).

The vectorized modes are checked against loops over the definitions, at fixed length against
each other (constant factors), and the default against the lab's earlier normaliser bit for bit.
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.core.aggregation import LossAgg, aggregate, kl_term, parse_agg
from lab.core.kl import k3, kl_estimate
from lab.core.losses import compute_loss

seeds = st.integers(0, 2**31 - 1)


def loop_aggregate(values, mode, lengths, horizon):
    """The modes written as loops over sequences; lengths[b][t] live tokens lead each sequence."""
    batch, trial = len(lengths), len(lengths[0])
    sums = [[sum(float(values[b, t, q]) for q in range(lengths[b][t])) for t in range(trial)] for b in range(batch)]
    tokens = sum(sum(row) for row in lengths)
    per_sequence = {
        "token-mean": None,
        "seq-mean-token-mean": lambda b, t: sums[b][t] / lengths[b][t],
        "seq-mean-token-sum": lambda b, t: sums[b][t],
        "seq-mean-token-sum-norm": lambda b, t: sums[b][t] / horizon,
    }[mode]
    if per_sequence is None:
        return sum(sum(row) for row in sums) / tokens
    return sum(per_sequence(b, t) for b in range(batch) for t in range(trial)) / (batch * trial)


@st.composite
def masked_values(draw):
    seed = draw(seeds)
    batch, trial, pos = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 5))
    lengths = [[draw(st.integers(1, pos)) for _ in range(trial)] for _ in range(batch)]
    values = torch.randn(batch, trial, pos, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    mask = torch.arange(pos) < torch.tensor(lengths).unsqueeze(-1)
    return values, mask, lengths


@pytest.mark.parametrize("mode", [m.value for m in LossAgg])
@given(case=masked_values(), extra_horizon=st.integers(0, 3))
def test_each_mode_matches_a_loop_over_its_definition(mode, case, extra_horizon):
    values, mask, lengths = case
    horizon = values.shape[-1] + extra_horizon
    noisy = torch.where(mask, values, torch.full_like(values, float("nan")))  # padding never leaks
    got = float(aggregate(noisy, mode, mask, horizon))
    assert got == pytest.approx(loop_aggregate(values, mode, lengths, horizon), rel=1e-12, abs=1e-12)
    # a leading run axis is kept
    stacked = aggregate(torch.stack([values, 2 * values]), mode, torch.stack([mask, mask]), horizon)
    torch.testing.assert_close(stacked, torch.tensor([got, 2 * got], dtype=torch.float64), rtol=1e-12, atol=1e-12)


FIXED_LENGTH_FACTOR = {  # mode -> its value at fixed length L over the token mean (horizon C)
    "token-mean": lambda L, C: 1.0,
    "seq-mean-token-mean": lambda L, C: 1.0,
    "seq-mean-token-sum": lambda L, C: float(L),
    "seq-mean-token-sum-norm": lambda L, C: L / C,
}


@pytest.mark.parametrize("mode", [m.value for m in LossAgg])
@given(seed=seeds, length=st.integers(1, 5), extra=st.integers(0, 3),
       loss=st.sampled_from(["naive", "unclipped", "clipped"]))
def test_at_fixed_length_the_modes_differ_by_constant_factors_in_loss_and_kl(mode, seed, length, extra, loss):
    """Claim 16 still holds: at fixed length every mode is a constant multiple of token-mean, for the
    surrogate and for the KL term, with or without an all-ones mask, and so are the gradients."""
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(2, 3, length, generator=g, dtype=torch.float64) - 1
    log_probs = (old + 0.05 * torch.randn(2, 3, length, generator=g, dtype=torch.float64)).requires_grad_()
    ref = old + 0.1 * torch.randn(2, 3, length, generator=g, dtype=torch.float64)
    deltas = torch.randn(2, 3, generator=g, dtype=torch.float64)
    horizon, factor = length + extra, FIXED_LENGTH_FACTOR[mode](length, length + extra)
    ones = torch.ones(2, 3, length, dtype=torch.bool)
    base = compute_loss(log_probs, deltas, loss, old, 0.02)
    base_kl = kl_term(k3(log_probs, ref), "token-mean", None, horizon)  # C * token mean
    for mask in (None, ones):
        value = compute_loss(log_probs, deltas, loss, old, 0.02, agg=mode, mask=mask, horizon=horizon)
        kl = kl_term(k3(log_probs, ref), mode, mask, horizon)
        torch.testing.assert_close(value, factor * base, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(kl, factor * base_kl, rtol=1e-12, atol=1e-14)
        grad, grad_base = (torch.autograd.grad(v, log_probs, retain_graph=True)[0] for v in (value + kl, base + base_kl))
        torch.testing.assert_close(grad, factor * grad_base, rtol=1e-10, atol=1e-14)


@given(seed=seeds, loss=st.sampled_from(["naive", "unclipped", "clipped"]))
def test_the_default_is_the_labs_earlier_normaliser_bit_for_bit(seed, loss):
    """token-mean without a mask is the plain token mean and the k3 sum over sequences that every
    earlier run used, so factorised runs are byte-identical (tests/training/test_train.py pins them too)."""
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(2, 3, 4, 3, generator=g)  # run batch trial pos
    log_probs = old + 0.05 * torch.randn(2, 3, 4, 3, generator=g)
    deltas = torch.randn(2, 3, 4, generator=g)
    from lab.core.losses import parse_mode
    per_token = parse_mode(loss).entry.surrogate(log_probs, deltas.unsqueeze(-1), old, None, clip_eps=0.02)
    assert torch.equal(compute_loss(log_probs, deltas, loss, old, 0.02), per_token.mean(dim=(-3, -2, -1)))
    assert torch.equal(kl_term(k3(log_probs, old)), kl_estimate(log_probs, old))


def test_the_modes_part_when_lengths_vary():
    """One short and one long sequence: token-mean and seq-mean-token-mean weigh them differently."""
    values = torch.tensor([[[2.0, 0.0, 0.0], [1.0, 1.0, 1.0]]])
    mask = torch.tensor([[[True, False, False], [True, True, True]]])
    assert float(aggregate(values, "token-mean", mask)) == pytest.approx(5 / 4)
    assert float(aggregate(values, "seq-mean-token-mean", mask)) == pytest.approx((2 + 1) / 2)
    assert float(aggregate(values, "seq-mean-token-sum", mask)) == pytest.approx((2 + 3) / 2)
    assert float(aggregate(values, "seq-mean-token-sum-norm", mask, horizon=5)) == pytest.approx((2 + 3) / 2 / 5)


def test_an_unknown_mode_lists_the_choices():
    with pytest.raises(ValueError, match="token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm"):
        parse_agg("sum")
