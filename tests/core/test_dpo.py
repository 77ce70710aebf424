"""lab.core.dpo against independent plain-Python formulas (TRL's conventions).

    h        = (chosen - ref_chosen) - (rejected - ref_rejected)
    sigmoid  = -(1 - eps) log(1 / (1 + e^(-beta h))) - eps log(1 / (1 + e^(beta h)))
    ipo      = (h - 1 / (2 beta))^2
    rewards  = beta (chosen - ref_chosen), beta (rejected - ref_rejected)
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.core.dpo import (DPO_LOSSES, DPOLoss, Preference, dpo_loss, draw_preferences, parse_dpo_loss,
                          preference_probability)

logps = st.floats(-20.0, 0.0)
betas = st.floats(0.01, 5.0)


def plain_sigmoid(h, beta, eps):
    return -(1 - eps) * math.log(1 / (1 + math.exp(-beta * h))) - eps * math.log(1 / (1 + math.exp(beta * h)))


def plain_ipo(h, beta):
    return (h - 1 / (2 * beta)) ** 2


@given(c=logps, r=logps, rc=logps, rr=logps, beta=betas, eps=st.sampled_from([0.0, 0.1, 0.3, 0.5]))
def test_sigmoid_loss_and_rewards_are_trls(c, r, rc, rr, beta, eps):
    t = lambda v: torch.tensor([v], dtype=torch.float64)  # noqa: E731
    losses, chosen, rejected = dpo_loss(t(c), t(r), t(rc), t(rr), beta, "sigmoid", eps)
    h = (c - rc) - (r - rr)
    assert math.isclose(float(losses), plain_sigmoid(h, beta, eps), rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(float(chosen), beta * (c - rc), rel_tol=1e-12, abs_tol=1e-12)
    assert math.isclose(float(rejected), beta * (r - rr), rel_tol=1e-12, abs_tol=1e-12)


@given(c=logps, r=logps, rc=logps, rr=logps, beta=betas)
def test_ipo_loss_is_the_squared_distance_of_h_from_one_over_two_beta(c, r, rc, rr, beta):
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    losses, chosen, rejected = dpo_loss(t(c), t(r), t(rc), t(rr), beta, "ipo")
    h = (c - rc) - (r - rr)
    assert math.isclose(float(losses), plain_ipo(h, beta), rel_tol=1e-9, abs_tol=1e-9)
    assert float(chosen - rejected) == pytest.approx(beta * h, rel=1e-9, abs=1e-12)  # IPO's h is not scaled by beta


def test_a_mutant_ipo_with_beta_h_is_caught():
    """TRL's IPO does not multiply h by beta; a version that does fails the same comparison."""
    h, beta = 0.7, 0.25
    assert not math.isclose(plain_ipo(beta * h, beta), plain_ipo(h, beta))
    losses = dpo_loss(torch.tensor(0.7), torch.tensor(0.0), torch.tensor(0.0), torch.tensor(0.0), beta, "ipo")[0]
    assert not math.isclose(float(losses), plain_ipo(beta * h, beta), rel_tol=1e-6)


def test_shapes_leading_axes_and_per_run_beta():
    g = torch.Generator().manual_seed(0)
    logp = [torch.rand(3, 4, 5, generator=g, dtype=torch.float64).log() for _ in range(4)]
    beta = torch.tensor([0.1, 1.0, 3.0], dtype=torch.float64).reshape(3, 1, 1)  # float[run 1 1]
    losses, chosen, _ = dpo_loss(*logp, beta)
    assert losses.shape == chosen.shape == (3, 4, 5)
    for run in range(3):
        single = dpo_loss(*(v[run] for v in logp), float(beta[run]))[0]
        assert torch.allclose(losses[run], single, rtol=1e-12, atol=0)


def test_gradient_reaches_the_policy_not_the_reference_and_rewards_are_detached():
    c, r = torch.tensor([-1.0], requires_grad=True), torch.tensor([-2.0], requires_grad=True)
    rc, rr = torch.tensor([-1.5], requires_grad=True), torch.tensor([-1.5], requires_grad=True)
    losses, chosen, rejected = dpo_loss(c, r, rc, rr, 0.5)
    losses.sum().backward()
    h = (-1.0 + 1.5) - (-2.0 + 1.5)  # (c - rc) - (r - rr) = 1
    expected = -0.5 / (1 + math.exp(0.5 * h))  # d/dc of -log sigmoid(beta h) = -beta sigmoid(-beta h)
    assert c.grad.item() == pytest.approx(expected, rel=1e-6)
    assert r.grad.item() == pytest.approx(-expected, rel=1e-6)
    assert rc.grad is None and rr.grad is None
    assert not chosen.requires_grad and not rejected.requires_grad


def test_bad_arguments_are_refused():
    x = torch.zeros(2)
    with pytest.raises(ValueError, match="beta > 0"):
        dpo_loss(x, x, x, x, 0.0)
    with pytest.raises(ValueError, match="label_smoothing"):
        dpo_loss(x, x, x, x, 0.1, "sigmoid", 0.6)
    with pytest.raises(ValueError, match="sigmoid loss only"):
        dpo_loss(x, x, x, x, 0.1, "ipo", 0.1)
    with pytest.raises(ValueError, match="choose one of: sigmoid, ipo"):
        parse_dpo_loss("hinge")
    assert set(DPO_LOSSES) == set(DPOLoss)


def test_argmax_preference_keeps_the_higher_reward_and_drops_ties():
    first, second = torch.tensor([3.0, 1.0, 2.0]), torch.tensor([1.0, 3.0, 2.0])
    probability, kept = preference_probability(first, second, "argmax")
    assert probability.tolist() == [1.0, 0.0, 0.5] and kept.tolist() == [True, True, False]
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    wins, kept = draw_preferences(first, second, Preference.argmax, g)
    assert wins.tolist()[:2] == [True, False] and kept.tolist() == [True, True, False]
    assert torch.equal(g.get_state(), state)  # argmax draws nothing


def test_bradley_terry_preference_probability_and_draw_frequency():
    """P(y_1 wins) = 1 / (1 + e^-(r_1 - r_2)); 200,000 seeded draws match it within 5 standard errors."""
    first, second = torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64), torch.tensor([1.0, 0.0, 3.0],
                                                                                      dtype=torch.float64)
    probability, kept = preference_probability(first, second, "bradley-terry")
    plain = [1 / (1 + math.exp(-(a - b))) for a, b in zip(first.tolist(), second.tolist())]
    assert probability.tolist() == pytest.approx(plain, rel=1e-12) and bool(kept.all())
    draws = 200_000
    wins, _ = draw_preferences(first.expand(draws, 3), second.expand(draws, 3), "bradley-terry",
                               torch.Generator().manual_seed(1))
    frequency = wins.double().mean(dim=0)
    stderr = torch.sqrt(probability * (1 - probability) / draws)
    assert bool(((frequency - probability).abs() < 5 * stderr).all())
    again, _ = draw_preferences(first.expand(draws, 3), second.expand(draws, 3), "bradley-terry",
                                torch.Generator().manual_seed(1))
    assert torch.equal(wins, again)


def test_trls_length_normalised_ipo_divides_each_log_ratio_by_its_token_count():
    """TRL's IPO (loss_type="ipo") divides each sequence's log-probs by its token count before the difference:
    ((lw - rw) / nw - (ll - rl) / nl - 1 / (2 beta))^2, written out here; without lengths (the lab's default) the
    sums; at one fixed length L the normalised form is the summed one at beta / L, divided by L^2. Giving one length
    alone is refused."""
    lw, ll, rw, rl = (torch.tensor(v, dtype=torch.float64) for v in ([-2.0, -5.0], [-3.0, -4.0], [-2.5, -4.5],
                                                                   [-2.0, -4.2]))
    nw, nl, beta = torch.tensor([2.0, 5.0], dtype=torch.float64), torch.tensor([3.0, 4.0], dtype=torch.float64), 0.2
    normalised = dpo_loss(lw, ll, rw, rl, beta, "ipo", chosen_lengths=nw, rejected_lengths=nl)[0]
    torch.testing.assert_close(normalised, ((lw - rw) / nw - (ll - rl) / nl - 1 / (2 * beta)) ** 2)
    summed = dpo_loss(lw, ll, rw, rl, beta, "ipo")[0]
    torch.testing.assert_close(summed, ((lw - rw) - (ll - rl) - 1 / (2 * beta)) ** 2)
    length = torch.full((2,), 3.0, dtype=torch.float64)
    torch.testing.assert_close(dpo_loss(lw, ll, rw, rl, beta, "ipo", chosen_lengths=length, rejected_lengths=length)[0],
                               dpo_loss(lw, ll, rw, rl, beta / 3, "ipo")[0] / 9)
    with pytest.raises(ValueError, match="both"):
        dpo_loss(lw, ll, rw, rl, beta, "ipo", chosen_lengths=nw)
