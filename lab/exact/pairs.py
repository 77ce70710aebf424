"""The population DPO loss: the exact expectation of the per-pair loss over every pair of responses.

A pair (y_1, y_2) is drawn i.i.d. from mu (pi_ref for offline data, the current policy for online
pairs), the preference model (`lab.core.dpo.Preference`) says y_1 wins with probability q(y_1, y_2)
or drops the pair (argmax on a tie), and the winner's loss is `lab.core.dpo.dpo_loss`:

    L(pi) = sum_{a,b} mu(a) mu(b) k(a,b) [q(a,b) l(a over b) + (1 - q(a,b)) l(b over a)] / sum_{a,b} mu(a) mu(b) k(a,b)

with k(a,b) = 1 for a kept pair: the mean loss per kept pair, as a training batch averages it (0 when
no pair is kept). Tables are float[... n] over a prompt's n enumerated responses (`lab.exact.varlen`),
so the grid of pairs is float[... n n]; autograd through `log_probs` gives the exact population gradient.

Claim 28 (docs/claims.md): under Bradley-Terry preferences on pairs from pi_ref, pi* is a stationary
point of this loss; under argmax preferences the sigmoid loss has no finite minimiser; IPO's has one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lab.core.dpo import DPOLoss, Preference, dpo_loss, preference_probability


def pair_preferences(rewards: Tensor, preference: Preference | str) -> tuple[Tensor, Tensor]:
    """q(a, b) = P(a beats b) float[... n n] and kept bool[... n n] for every ordered pair of responses."""
    return preference_probability(rewards.unsqueeze(-1), rewards.unsqueeze(-2), preference)


def pair_losses(log_probs: Tensor, ref_log_probs: Tensor, beta: float, loss_type: DPOLoss | str = "sigmoid",
                label_smoothing: float = 0.0) -> Tensor:
    """l(a over b), the loss of a pair whose chosen response is a and rejected b: float[... n n]."""
    ref = ref_log_probs.detach()
    return dpo_loss(log_probs.unsqueeze(-1), log_probs.unsqueeze(-2), ref.unsqueeze(-1), ref.unsqueeze(-2),
                    beta, loss_type, label_smoothing)[0]


def population_dpo_loss(log_probs: Tensor, ref_log_probs: Tensor, rewards: Tensor, beta: float,
                        preference: Preference | str = "argmax", loss_type: DPOLoss | str = "sigmoid",
                        label_smoothing: float = 0.0, pair_log_probs: Tensor | None = None) -> Tensor:
    """The mean loss per kept pair over pairs drawn from mu (module docstring): float[...].

    log_probs float[... n] of the policy (with gradient), ref_log_probs and rewards float[... n];
    mu = exp(pair_log_probs) (default pi_ref: offline pairs), treated as fixed.
    """
    sampler = (ref_log_probs if pair_log_probs is None else pair_log_probs).detach().exp()
    weights = sampler.unsqueeze(-1) * sampler.unsqueeze(-2)  # float[... n n]: P(y_1 = a, y_2 = b)
    q, kept = pair_preferences(rewards.to(log_probs), preference)
    losses = pair_losses(log_probs, ref_log_probs, beta, loss_type, label_smoothing)
    per_pair = q * losses + (1 - q) * losses.transpose(-1, -2)
    zero = torch.zeros((), dtype=weights.dtype)
    total = torch.where(kept, weights, zero).sum(dim=(-2, -1))
    weighted = torch.where(kept, weights * per_pair, zero)  # a dropped pair adds nothing, not even a NaN
    mean = weighted.sum(dim=(-2, -1)) / total.clamp_min(torch.finfo(total.dtype).tiny)
    return torch.where(total > 0, mean, torch.zeros((), dtype=mean.dtype))
