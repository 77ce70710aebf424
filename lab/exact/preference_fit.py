"""The Bradley-Terry fit on every pair, exactly: what a reward model's loss asks of its scores.

For one prompt's responses y with pair weights w(a, b) = pi(a) pi(b) (both drawn from pi), true rewards
r and scores phi, the population negative log-likelihood of Bradley-Terry labels
P(a preferred to b) = sigmoid((r_a - r_b) / T) is

    L(phi) = - sum over ordered pairs (a, b) of  w(a, b) sigmoid((r_a - r_b)/T) log sigmoid(phi_a - phi_b)

(an unordered pair's two outcomes are its two orders; a = b contributes a constant). It is convex in phi, depends on
phi only through differences, and with full-support pi is minimised exactly where phi_a - phi_b =
(r_a - r_b) / T for every pair: phi = r / T + c, the reward up to a constant per prompt (claim 33). Argmax
labels (the higher reward always wins) have no finite minimiser: the loss falls as the score gaps grow.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def pair_labels(rewards: Tensor, temperature: float | None) -> Tensor:
    """P(a preferred to b) float64[batch n n]: Bradley-Terry at `temperature`, or argmax (ties 1/2) with None."""
    gaps = rewards.unsqueeze(-1) - rewards.unsqueeze(-2)
    if temperature is None:
        return (torch.sign(gaps) + 1) / 2
    return torch.sigmoid(gaps / temperature)


def population_bt_loss(scores: Tensor, probs: Tensor, rewards: Tensor, temperature: float | None = 1.0) -> Tensor:
    """L(phi) float[batch] for scores float[batch n] (module docstring), an exact sum over every pair."""
    gaps = scores.unsqueeze(-1) - scores.unsqueeze(-2)  # phi_a - phi_b, float[batch n n]
    weights = probs.unsqueeze(-1) * probs.unsqueeze(-2)
    labels = pair_labels(rewards, temperature).to(scores)
    return -(weights * labels * F.logsigmoid(gaps)).sum((-2, -1))
