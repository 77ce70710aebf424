"""GAE, PPO's clipped value loss, whitening and explained variance (lab/core/gae.py).

Every function is checked against a plain-Python loop written here, one response (or one run) at a time:
    delta_t = r_t + V_{t+1} - V_t (V after the last live token = 0),  A_t = delta_t + lambda A_{t+1},  R_t = A_t + V_t;
    loss = 0.5 mean max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2);  whiten (A - mean) / sqrt(var + 1e-8).
"""

import statistics

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.core.gae import WHITEN, explained_variance, gae_advantages, masked_whiten, terminal_rewards, value_loss

TOLERANCE = dict(rtol=1e-10, atol=1e-12)  # float64 against a float64 loop


def scan_formula(rewards: list[float], values: list[float], length: int, lam: float) -> tuple[list, list]:
    """One response's advantages and targets, a plain loop over its `length` live tokens, padding 0."""
    size = len(values)
    advantages, targets = [0.0] * size, [0.0] * size
    following = 0.0
    for t in reversed(range(length)):
        next_value = values[t + 1] if t + 1 < length else 0.0
        delta = rewards[t] + next_value - values[t]
        following = delta + lam * following
        advantages[t], targets[t] = following, following + values[t]
    return advantages, targets


def batch(seed: int, runs: int = 2, prompts: int = 2, trials: int = 3, pos: int = 4):
    """Random values, lengths 1..pos (a live prefix), terminal rewards: float64 [run batch trial pos]."""
    g = torch.Generator().manual_seed(seed)
    shape = (runs, prompts, trials)
    lengths = torch.randint(1, pos + 1, shape, generator=g)
    mask = torch.arange(pos) < lengths.unsqueeze(-1)
    values = torch.randn(*shape, pos, generator=g, dtype=torch.float64)
    rewards = torch.randint(0, 6, shape, generator=g).double()
    return rewards, values, mask, lengths


@given(seed=st.integers(0, 2**31 - 1), lam=st.sampled_from([0.0, 0.3, 0.9, 1.0]))
def test_gae_matches_the_plain_reverse_loop(seed, lam):
    rewards, values, mask, lengths = batch(seed)
    token_rewards = terminal_rewards(rewards, mask)
    advantages, targets = gae_advantages(token_rewards, values, mask, lam)
    for index in torch.cartesian_prod(*[torch.arange(n) for n in rewards.shape]):
        i = tuple(index.tolist())
        want_a, want_r = scan_formula(token_rewards[i].tolist(), values[i].tolist(), int(lengths[i]), lam)
        torch.testing.assert_close(advantages[i], torch.tensor(want_a, dtype=torch.float64), **TOLERANCE)
        torch.testing.assert_close(targets[i], torch.tensor(want_r, dtype=torch.float64), **TOLERANCE)


def test_terminal_reward_sits_on_the_last_live_token():
    mask = torch.tensor([[True, True, False], [True, True, True], [True, False, False]])
    got = terminal_rewards(torch.tensor([2.0, 3.0, 5.0]), mask)
    assert got.tolist() == [[0.0, 2.0, 0.0], [0.0, 0.0, 3.0], [5.0, 0.0, 0.0]]


def test_lambda_one_is_the_return_minus_the_value_and_lambda_zero_telescopes():
    rewards, values, mask, _ = batch(3)
    token_rewards = terminal_rewards(rewards, mask)
    ones, _ = gae_advantages(token_rewards, values, mask, 1.0)
    torch.testing.assert_close(ones, (rewards.unsqueeze(-1) - values) * mask, **TOLERANCE)
    zeros, targets = gae_advantages(token_rewards, values, mask, 0.0)
    torch.testing.assert_close(zeros.sum(-1), rewards - values[..., 0], **TOLERANCE)  # sum delta_t = R - V_0
    next_values = torch.cat([values[..., 1:] * mask[..., 1:], torch.zeros_like(values[..., :1])], dim=-1)
    torch.testing.assert_close(targets, (token_rewards + next_values) * mask, **TOLERANCE)  # the one-step target


def test_a_lambda_per_run_is_each_run_computed_alone():
    rewards, values, mask, _ = batch(5, runs=3)
    lams = torch.tensor([0.0, 0.5, 1.0])
    together, targets = gae_advantages(terminal_rewards(rewards, mask), values, mask, lams)
    for run, lam in enumerate(lams.tolist()):
        alone, alone_targets = gae_advantages(terminal_rewards(rewards[run], mask[run]), values[run], mask[run], lam)
        torch.testing.assert_close(together[run], alone, **TOLERANCE)
        torch.testing.assert_close(targets[run], alone_targets, **TOLERANCE)


def loss_formula(new: list, old: list, targets: list, live: list, clip: float) -> tuple[float, float]:
    losses, clipped_count = [], 0
    for v, v_old, target, on in zip(new, old, targets, live):
        if not on:
            continue
        v_clip = v_old + min(max(v - v_old, -clip), clip)
        plain, far = (v - target) ** 2, (v_clip - target) ** 2
        losses.append(max(plain, far))
        clipped_count += far > plain
    return 0.5 * sum(losses) / len(losses), clipped_count / len(losses)


@pytest.mark.parametrize("clip", [0.05, 0.5, 10.0])
def test_value_loss_matches_the_plain_loop_per_run(clip):
    _, old, mask, _ = batch(7)
    g = torch.Generator().manual_seed(8)
    new = old + 0.6 * torch.randn(old.shape, generator=g, dtype=torch.float64)
    targets = torch.randn(old.shape, generator=g, dtype=torch.float64) * 2
    loss, clipfrac = value_loss(new, old, targets, mask, clip)
    for run in range(old.shape[0]):
        want = loss_formula(*(x[run].flatten().tolist() for x in (new, old, targets, mask)), clip)
        assert loss[run].item() == pytest.approx(want[0], rel=1e-12)
        assert clipfrac[run].item() == pytest.approx(want[1], rel=1e-12)
    if clip == 10.0:  # no prediction moved that far: the plain squared error, nothing clipped
        assert float(clipfrac.max()) == 0.0
    tensor_clip, _ = value_loss(new, old, targets, mask, torch.tensor([clip, clip], dtype=torch.float64))
    torch.testing.assert_close(tensor_clip, loss, **TOLERANCE)


def test_value_loss_gradient_is_silent_where_the_clipped_term_wins():
    old, target = torch.tensor([[[[0.0]]]]), torch.tensor([[[[2.0]]]])
    new = torch.tensor([[[[-1.0]]]], requires_grad=True)  # moved away from the target, beyond the clip range
    loss, clipfrac = value_loss(new, old, target, torch.ones_like(old, dtype=torch.bool), 0.5)
    loss.sum().backward()
    assert clipfrac.item() == 0.0 and new.grad.item() == pytest.approx(-3.0)  # plain term wins: (V - R) = -3
    new = torch.tensor([[[[3.0]]]], requires_grad=True)  # overshot the target beyond the clip range
    loss, clipfrac = value_loss(new, old, target, torch.ones_like(old, dtype=torch.bool), 0.5)
    loss.sum().backward()
    assert clipfrac.item() == 1.0 and new.grad.item() == 0.0  # (V_clip - R)^2 = 2.25 > (V - R)^2 = 1: no gradient


def test_whitening_matches_the_sample_statistics_of_the_live_tokens_per_run():
    _, advantages, mask, _ = batch(11)
    whitened = masked_whiten(advantages, mask)
    for run in range(advantages.shape[0]):
        live = advantages[run][mask[run]].tolist()
        mean, var = statistics.mean(live), statistics.variance(live)  # Bessel-corrected, as verl
        want = [(a - mean) / (var + WHITEN.eps) ** 0.5 for a in live]
        torch.testing.assert_close(whitened[run][mask[run]], torch.tensor(want, dtype=torch.float64), **TOLERANCE)
    assert bool((whitened[~mask] == 0).all())


def test_explained_variance_is_verls_formula_written_out():
    """verl's vf_explained_var: 1 - torch.var(R - V) / (torch.var(R) + 1e-5) over the live tokens (Bessel-corrected
    both), written out with `statistics`; 1 for a perfect critic. Where every target is equal verl's number is
    1 - Var(R - V) / 1e-5, finite, not NaN (mutant: the plain ratio without 1e-5 is NaN there)."""
    _, targets, mask, _ = batch(13)
    values = 0.5 * targets + 0.1
    got = explained_variance(targets, values, mask)
    for run in range(2):
        r, v = targets[run][mask[run]].tolist(), values[run][mask[run]].tolist()
        want = 1 - statistics.variance([a - b for a, b in zip(r, v)]) / (statistics.variance(r) + 1e-5)
        assert float(got[run]) == pytest.approx(want, rel=1e-12)
    assert torch.allclose(explained_variance(targets, targets, mask), torch.ones(2, dtype=torch.float64))
    constant = torch.ones_like(targets)
    flat = explained_variance(constant, constant + 0.01 * targets, mask)
    r, v = constant[0][mask[0]].tolist(), (constant + 0.01 * targets)[0][mask[0]].tolist()
    assert float(flat[0]) == pytest.approx(1 - statistics.variance([a - b for a, b in zip(r, v)]) / 1e-5, rel=1e-9)
    assert bool(torch.isfinite(flat).all())
