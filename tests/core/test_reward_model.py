"""lab.core.reward_model against plain formulas (TRL's RewardTrainer conventions)."""

import math

import pytest
import torch

from lab.core.reward_model import reward_model_loss, reward_model_metrics

CHOSEN = torch.tensor([2.0, 0.5, -1.0, 3.0], dtype=torch.float64)
REJECTED = torch.tensor([1.0, 0.5, 0.0, -2.0], dtype=torch.float64)


def plain_loss(chosen, rejected, margins=None, mu=None):
    margins = margins or [0.0] * len(chosen)
    nll = sum(math.log(1 + math.exp(-(c - r - m))) for c, r, m in zip(chosen, rejected, margins)) / len(chosen)
    return nll + (mu * sum((c + r) ** 2 for c, r in zip(chosen, rejected)) / len(chosen) if mu else 0.0)


def test_loss_is_the_mean_bradley_terry_negative_log_likelihood():
    assert float(reward_model_loss(CHOSEN, REJECTED)) == pytest.approx(plain_loss(CHOSEN.tolist(), REJECTED.tolist()),
                                                                       abs=1e-12)


def test_margin_and_centring_follow_trl():
    """With a margin per pair the sigmoid's argument is r_c - r_r - m; the centring term adds mu * mean((r_c + r_r)^2).
    A margin with the wrong sign gives a different loss."""
    margins = [0.5, 1.0, 0.0, 2.0]
    ours = float(reward_model_loss(CHOSEN, REJECTED, torch.tensor(margins, dtype=torch.float64), 0.01))
    assert ours == pytest.approx(plain_loss(CHOSEN.tolist(), REJECTED.tolist(), margins, 0.01), abs=1e-12)
    wrong = plain_loss(CHOSEN.tolist(), REJECTED.tolist(), [-m for m in margins], 0.01)
    assert abs(ours - wrong) > 1e-3


def test_accuracy_is_strict_and_margin_is_the_mean_gap():
    """A tie (the second pair) is not a right ranking, as in TRL (`>` not `>=`, which would give 3/4): 2 of 4 right;
    the margin is the mean of 1, 0, -1 and 5."""
    metrics = reward_model_metrics(CHOSEN, REJECTED)
    assert metrics["accuracy"] == 0.5
    assert metrics["margin"] == pytest.approx(1.25, abs=1e-12)
