"""Generalised advantage estimation with a learned critic (Schulman et al. 2016), PPO's value loss, whitening.

One response, live positions t = 0..T-1 (a prefix of the positions: a response ends at EOS),
s_t the state before token t, a critic's values V_t = V(s_t), and per-token rewards r_t (a terminal
reward: the response's reward on its last live token, 0 elsewhere). With gamma = 1:

    delta_t  = r_t + V_{t+1} - V_t             V_T = 0: nothing follows the last live token
    A_t      = sum_{l >= 0} lambda^l delta_{t+l}  =  delta_t + lambda A_{t+1}       (a reverse scan)
    R_t      = A_t + V_t                       the critic's regression target ("returns", as verl)

lambda = 1 gives A_t = R - V_t (the Monte Carlo return minus the critic); lambda = 0 gives
A_t = delta_t, and the deltas telescope: sum_t delta_t = R - V_0 for any critic. Padding after EOS
gets advantage 0 and target 0 (and no loss). A policy whose every position depends only on the
prompt (the factorised one) makes one decision per response, at one state, the prompt: call the
scan with one position (the response's reward and V(x)) and give every token its A = R - V(x),
whatever lambda.

The value loss is verl's `compute_value_loss` (PPO's clipped value objective): with the values
V_old the targets were made from, a new prediction V and a clip range c,

    V_clip   = V_old + clip(V - V_old, -c, c)
    loss     = 0.5 * token-mean( max((V - R_t)^2, (V_clip - R_t)^2) )
    clipfrac = token-mean( (V_clip - R_t)^2 > (V - R_t)^2 )

Whitening (verl's `masked_whiten`, TRL's `whiten`): (A - mean) / sqrt(var + 1e-8) over the live
tokens, var Bessel-corrected as verl's `masked_var`. Token axes are (batch trial pos); any leading
axes (such as `run`) are kept, so each run is whitened and averaged on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

TOKEN_AXES = (-3, -2, -1)  # batch trial pos


@dataclass(frozen=True)
class WhitenConfig:
    """The numbers of `masked_whiten`."""

    eps: float = 1e-8
    """added to the variance before the square root (verl's and TRL's 1e-8)"""


WHITEN = WhitenConfig()


def terminal_rewards(rewards: Tensor, mask: Tensor) -> Tensor:
    """The response's reward on its last live token, 0 elsewhere: rewards float[... trial], mask bool[... trial pos]
    -> float[... trial pos]."""
    live = mask.long()
    last = live.sum(dim=-1, keepdim=True) - 1  # int[... trial 1]: the last live position
    positions = torch.arange(mask.shape[-1], device=mask.device)
    return torch.where(positions == last, rewards.unsqueeze(-1), torch.zeros((), dtype=rewards.dtype))


def _as_leading(value: float | Tensor, reference: Tensor) -> float | Tensor:
    """A float as it is; a tensor over the leading axes (one per run: float[run]) shaped to broadcast
    against `reference`."""
    if isinstance(value, Tensor):
        return value.to(reference).reshape(*value.shape, *([1] * (reference.dim() - value.dim())))
    return value


def gae_advantages(token_rewards: Tensor, values: Tensor, mask: Tensor,
                   lam: float | Tensor = 1.0) -> tuple[Tensor, Tensor]:
    """GAE(lambda) with gamma = 1 (module docstring): (advantages A_t, targets R_t = A_t + V_t), both
    float[... batch trial pos], 0 on padding.

    token_rewards and values float[... batch trial pos], mask bool[... batch trial pos] (the live tokens,
    a prefix of the positions); `lam` a float in [0, 1] or float[run] (one per run of a leading run axis).
    """
    live = mask.to(values.dtype)
    values = values * live  # padding has no value: the value after the last live token is 0
    rewards = token_rewards * live
    lam = _as_leading(lam, values[..., 0])
    next_value = torch.zeros_like(values[..., 0])
    running = torch.zeros_like(values[..., 0])
    advantages = []
    for t in reversed(range(values.shape[-1])):
        delta = rewards[..., t] + next_value - values[..., t]
        running = (delta + lam * running) * live[..., t]
        next_value = values[..., t]
        advantages.append(running)
    advantages = torch.stack(advantages[::-1], dim=-1)
    return advantages, (advantages + values) * live


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor,
               cliprange_value: float | Tensor) -> tuple[Tensor, Tensor]:
    """verl's clipped value loss and the fraction of live tokens where the clipped term is the larger:
    (loss, clipfrac), each float[...] (one per run). Inputs float[... batch trial pos], mask bool."""
    live = mask.to(values.dtype)
    clip = _as_leading(cliprange_value, values)
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    plain, far = (values - returns) ** 2, (clipped - returns) ** 2
    tokens = live.sum(dim=TOKEN_AXES)
    loss = 0.5 * (torch.maximum(plain, far) * live).sum(dim=TOKEN_AXES) / tokens
    clipfrac = ((far > plain).to(values.dtype) * live).sum(dim=TOKEN_AXES) / tokens
    return loss, clipfrac


def masked_whiten(advantages: Tensor, mask: Tensor, config: WhitenConfig = WHITEN) -> Tensor:
    """(A - mean) / sqrt(var + eps) over the live tokens of each run (Bessel-corrected var, as verl),
    0 on padding: float[... batch trial pos] -> the same shape."""
    live = mask.to(advantages.dtype)
    tokens = live.sum(dim=TOKEN_AXES, keepdim=True)
    mean = (advantages * live).sum(dim=TOKEN_AXES, keepdim=True) / tokens
    var = (((advantages - mean) * live) ** 2).sum(dim=TOKEN_AXES, keepdim=True) / (tokens - 1)
    return (advantages - mean) * torch.rsqrt(var + config.eps) * live


EXPLAINED_VARIANCE_EPS = 1e-5
"""Added to Var(R_t) in the explained variance's denominator, as verl's `compute_data_metrics` adds it."""


def explained_variance(returns: Tensor, values: Tensor, mask: Tensor) -> Tensor:
    """verl's `vf_explained_var`, 1 - Var(R_t - V) / (Var(R_t) + 1e-5) over the live tokens of each run, both
    variances Bessel-corrected (torch.var, as verl): float[...]. 1 for a perfect critic, about 0 for one that
    predicts the mean target; where every target is equal, 1 - Var(R_t - V) / 1e-5 (verl's number, however
    negative), not NaN; NaN only with fewer than two live tokens."""
    live = mask.to(values.dtype)
    tokens = live.sum(dim=TOKEN_AXES)

    def variance(x: Tensor) -> Tensor:
        mean = (x * live).sum(dim=TOKEN_AXES, keepdim=True) / tokens[..., None, None, None]
        return (((x - mean) * live) ** 2).sum(dim=TOKEN_AXES) / (tokens - 1)

    ratio = 1 - variance(returns - values) / (variance(returns) + EXPLAINED_VARIANCE_EPS)
    return torch.where(tokens > 1, ratio, torch.full_like(ratio, float("nan")))
