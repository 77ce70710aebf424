"""Policy-gradient surrogate losses; their gradients are the update.

With per-token log-probs l = log pi_theta(y_q | x), frozen l_old, deltas d
broadcast over positions, ratio rho = exp(l - l_old), and mean over
(batch, trial, pos):

    naive      L = -mean(l * d)
    unclipped  L = -mean(rho * d)
    clipped    L = -mean(min(rho * d, clip(rho, 1 - eps, 1 + eps) * d))

At theta = theta_old, rho = 1 and grad rho = grad l, so all three have the same
gradient; they part once the same batch is reused for several steps. Because
the length is fixed, the token mean equals the mean of per-sequence means and a
constant multiple of per-sequence sums (claim 16, docs/claims.md), so the choice of
normaliser TRL and verl debate only rescales the loss here. With variable-length
responses it does not: `agg` picks one of verl's modes (`lab.core.aggregation`).

Any leading axes (such as `run`) are kept: the mean is over the last three.
"""

from __future__ import annotations

import math
from enum import Enum

import torch
from torch import Tensor

from lab.core.aggregation import LossAgg, aggregate
from lab.core.choices import parse_choice
from lab.core.modes import TrainingLoss


class LossMode(str, Enum):
    """Which surrogate turns deltas into a loss."""

    naive = "naive"
    unclipped = "unclipped"
    clipped = "clipped"


TOKEN_AXES = (-3, -2, -1)  # batch trial pos


def _as_leading(value: float | Tensor, like: Tensor) -> float | Tensor:
    """A per-run setting float[...] shaped to broadcast against float[... batch trial pos]."""
    if isinstance(value, Tensor) and value.dim() > 0:
        return value.reshape(*value.shape, 1, 1, 1).to(like)
    return value


def ratios(log_probs: Tensor, old_log_probs: Tensor) -> Tensor:
    """rho = pi_theta / pi_old per token: float[... batch trial pos] (old is detached)."""
    return torch.exp(log_probs - old_log_probs.detach())


def _naive(log_probs, token_deltas, old_log_probs, clip_eps):
    return log_probs * -token_deltas  # = -(l * d) exactly; the sign on d keeps a node out of the graph


def _unclipped(log_probs, token_deltas, old_log_probs, clip_eps):
    return -(ratios(log_probs, old_log_probs) * token_deltas)


def _clipped(log_probs, token_deltas, old_log_probs, clip_eps):
    rho = ratios(log_probs, old_log_probs)
    eps = _as_leading(clip_eps, rho)
    clipped_rho = torch.clamp(rho, 1 - eps, 1 + eps)
    return -torch.minimum(rho * token_deltas, clipped_rho * token_deltas)


LOSS_FUNCTIONS = {
    LossMode.naive: _naive,
    LossMode.unclipped: _unclipped,
    LossMode.clipped: _clipped,
}
"""The one dispatch table: mode -> per-token loss float[... batch trial pos]."""

NEEDS_OLD = frozenset({LossMode.unclipped, LossMode.clipped})


def parse_mode(mode: LossMode | str) -> LossMode:
    if mode == TrainingLoss.dpo:
        raise ValueError("loss 'dpo' is a loss on preference pairs (lab.core.dpo.dpo_loss), not a surrogate of deltas")
    return parse_choice(LossMode, mode, "loss mode")


def compute_loss(
    log_probs: Tensor,
    deltas: Tensor,
    mode: LossMode | str,
    old_log_probs: Tensor | None = None,
    clip_eps: float | Tensor = 0.01,
    agg: LossAgg | str = LossAgg.token_mean,
    mask: Tensor | None = None,
    horizon: int | None = None,
    per_token: bool = False,
) -> Tensor:
    """The surrogate loss, averaged over batch, trial and pos (`agg`: how; lab.core.aggregation).

    log_probs float[... batch trial pos] (with gradient), deltas float[... batch trial],
    old_log_probs float[... batch trial pos] (required by `unclipped` and `clipped`;
    always treated as constants), clip_eps a float or float[...] per leading index; `mask`
    bool[... batch trial pos] marks live tokens of variable-length responses and `horizon` is the
    constant divisor of `seq-mean-token-sum-norm` (lab.core.aggregation). The default (token-mean, no
    mask) is the plain mean over (batch, trial, pos). With `per_token` the deltas are float[... batch trial pos],
    one per token (GAE's advantages, `lab.core.gae`). Returns float[...] (a scalar without leading axes).
    """
    mode = parse_mode(mode)
    if mode in NEEDS_OLD and old_log_probs is None:
        raise ValueError(f"loss mode {mode.value!r} needs old_log_probs (the sampling policy's log-probs)")
    token_deltas = deltas if per_token else deltas.unsqueeze(-1)  # float[... batch trial 1]: one for every position
    token_losses = LOSS_FUNCTIONS[mode](log_probs, token_deltas, old_log_probs, clip_eps)
    return aggregate(token_losses, agg, mask, horizon)


def clip_fractions(
    log_probs: Tensor, old_log_probs: Tensor, deltas: Tensor, clip_eps: float | Tensor
) -> tuple[Tensor, Tensor]:
    """Fractions of tokens whose clipped term has no gradient, split by side (TRL's low/high).

    low: rho < 1 - eps with delta < 0 (pushed down far enough already);
    high: rho > 1 + eps with delta > 0 (pushed up far enough already).
    Returns two float[...] (means over batch, trial, pos).
    """
    return clip_fractions_from_ratios(ratios(log_probs.detach(), old_log_probs), deltas, clip_eps)


def clip_fractions_from_ratios(rho: Tensor, deltas: Tensor, clip_eps: float | Tensor,
                               per_token: bool = False) -> tuple[Tensor, Tensor]:
    """`clip_fractions` from precomputed ratios float[... batch trial pos] (reused by the loop).

    rho may carry extra leading axes beyond the deltas' (the loop passes float[step run batch trial pos]);
    with `per_token` the deltas are float[... batch trial pos], one per token (GAE's advantages).
    """
    eps = _as_leading(clip_eps, rho)
    side = deltas if per_token else deltas.unsqueeze(-1)  # float[... batch trial 1 or pos]
    never = torch.zeros((), dtype=rho.dtype, device=rho.device)  # a bound rho (>= 0) never falls below
    # each response's bound on its clipping side; on the other side a bound no ratio crosses
    low_bound = torch.where(side < 0, 1 - eps, never)  # float[... batch trial 1]
    high_bound = torch.where(side > 0, 1 + eps, never + math.inf)
    # laid out over pos like one slice of rho, the bounds meet rho in one contiguous pass (broadcast
    # over pos inside a token-sized comparison, it runs as many short strided loops)
    like = rho[(0,) * (rho.dim() - side.dim())]  # float[... batch trial pos]
    low = (rho < torch.empty_like(like).copy_(low_bound.expand_as(like))).sum(dim=TOKEN_AXES)
    high = (rho > torch.empty_like(like).copy_(high_bound.expand_as(like))).sum(dim=TOKEN_AXES)
    tokens = like.shape[-3] * like.shape[-2] * like.shape[-1]
    return low / tokens, high / tokens
