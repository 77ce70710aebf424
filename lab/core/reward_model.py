"""A reward model's loss on preference pairs, as TRL's `RewardTrainer` computes it.

For pairs (y_c, y_r) of one prompt with scores r_c = r_phi(x, y_c) and r_r = r_phi(x, y_r), a margin m
per pair (optional) and a centring coefficient mu (optional):

    loss     = mean over pairs of  -log sigmoid(r_c - r_r - m)   +   mu * mean((r_c + r_r)^2)
    accuracy = mean [r_c > r_r]          (strict, as TRL: a tie is not a right ranking)
    margin   = mean (r_c - r_r)

The first term is the Bradley-Terry negative log-likelihood of "y_c preferred" (Ouyang et al. 2022,
eq. 1); the second pins the scores' free constant (Eisenstein et al. 2023), which the likelihood
leaves undetermined (claim 33, docs/claims.md).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def reward_model_loss(chosen: Tensor, rejected: Tensor, margin: Tensor | float | None = None,
                      center_rewards_coefficient: float | None = None) -> Tensor:
    """The scalar loss for scores float[pairs] of the chosen and rejected responses (module docstring)."""
    difference = chosen - rejected if margin is None else chosen - rejected - margin
    loss = -F.logsigmoid(difference).mean()
    if center_rewards_coefficient is not None:
        loss = loss + center_rewards_coefficient * ((chosen + rejected) ** 2).mean()
    return loss


def reward_model_metrics(chosen: Tensor, rejected: Tensor) -> dict[str, float]:
    """TRL's `accuracy` (strict) and `margin`, from scores float[pairs]."""
    return {"accuracy": float((chosen > rejected).double().mean()), "margin": float((chosen - rejected).mean())}
