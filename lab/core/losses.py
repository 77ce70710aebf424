"""Policy-gradient surrogate losses; their gradients are the update.

With per-token log-probs l = log pi_theta(y_q | x), frozen l_old, deltas d
broadcast over positions, ratio rho = exp(l - l_old), and mean over
(batch, trial, pos):

    naive      L = -mean(l * d)
    unclipped  L = -mean(rho * d)
    clipped    L = -mean(min(rho * d, clip(rho, 1 - eps, 1 + eps) * d))

Each is a function here named by its entry in the `TrainingLoss` table (`lab.core.modes`), which also says
whether it reads l_old, which clip metrics it reports and which settings it takes.

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

import torch
from torch import Tensor

from lab.core.aggregation import LossAgg, aggregate
from lab.core.choices import parse_choice
from lab.core.modes import TrainingLoss

SURROGATES = tuple(m for m in TrainingLoss if m.entry.surrogate is not None)
"""The losses that are surrogates of deltas (the policy-gradient ones): those `compute_loss` takes."""

TOKEN_AXES = (-3, -2, -1)  # batch trial pos


def as_leading(value: float | Tensor, like: Tensor) -> float | Tensor:
    """A per-run setting float[...] shaped to broadcast against float[... batch trial pos]."""
    if isinstance(value, Tensor) and value.dim() > 0:
        return value.reshape(*value.shape, 1, 1, 1).to(like)
    return value


def ratios(log_probs: Tensor, old_log_probs: Tensor) -> Tensor:
    """rho = pi_theta / pi_old per token: float[... batch trial pos] (old is detached)."""
    return torch.exp(log_probs - old_log_probs.detach())


def naive(log_probs, token_deltas, old_log_probs, mask, **settings):
    return log_probs * -token_deltas  # = -(l * d) exactly; the sign on d keeps a node out of the graph


def unclipped(log_probs, token_deltas, old_log_probs, mask, **settings):
    return -(ratios(log_probs, old_log_probs) * token_deltas)


def clipped(log_probs, token_deltas, old_log_probs, mask, clip_eps):
    rho = ratios(log_probs, old_log_probs)
    eps = as_leading(clip_eps, rho)
    clipped_rho = torch.clamp(rho, 1 - eps, 1 + eps)
    return -torch.minimum(rho * token_deltas, clipped_rho * token_deltas)


def parse_mode(mode: TrainingLoss | str) -> TrainingLoss:
    """A surrogate loss from a member or its name; a loss of another method (dpo, sft) is an error naming it."""
    loss = parse_choice(TrainingLoss, mode, "loss mode")
    if loss not in SURROGATES:
        raise ValueError(f"loss {loss.value!r} is a {loss.entry.method.value} loss, not a surrogate of deltas; "
                         f"the surrogates are: {', '.join(m.value for m in SURROGATES)}")
    return loss


def compute_loss(
    log_probs: Tensor,
    deltas: Tensor,
    mode: TrainingLoss | str,
    old_log_probs: Tensor | None = None,
    clip_eps: float | Tensor = 0.01,
    agg: LossAgg | str = LossAgg.token_mean,
    mask: Tensor | None = None,
    horizon: int | None = None,
    per_token: bool = False,
    gate: Tensor | None = None,
    **settings: float | Tensor,
) -> Tensor:
    """The surrogate loss, averaged over batch, trial and pos (`agg`: how; lab.core.aggregation).

    log_probs float[... batch trial pos] (with gradient), deltas float[... batch trial],
    old_log_probs float[... batch trial pos] (required by a loss whose entry `needs_old`;
    always treated as constants), clip_eps a float or float[...] per leading index; `mask`
    bool[... batch trial pos] marks live tokens of variable-length responses and `horizon` is the
    constant divisor of `seq-mean-token-sum-norm` (lab.core.aggregation). The default (token-mean, no
    mask) is the plain mean over (batch, trial, pos). With `per_token` the deltas are float[... batch trial pos],
    one per token (GAE's advantages, `lab.core.gae`). `gate` float[... batch trial pos] multiplies each token's
    loss before the aggregation, whose denominators it leaves alone (0 drops a token's gradient, as TRL's
    entropy mask). `settings`: any other field the loss's entry reads (`Loss.settings`). Returns float[...]
    (a scalar without leading axes).
    """
    entry = parse_mode(mode).entry
    if entry.needs_old and old_log_probs is None:
        raise ValueError(f"loss mode {entry.name!r} needs old_log_probs (the sampling policy's log-probs)")
    given = {"clip_eps": clip_eps, **settings}
    missing = [name for name in entry.settings if name not in given]
    if missing:
        raise ValueError(f"loss mode {entry.name!r} needs the setting {missing[0]!r}")
    token_deltas = deltas if per_token else deltas.unsqueeze(-1)  # float[... batch trial 1]: one for every position
    token_losses = entry.surrogate(log_probs, token_deltas, old_log_probs, mask,
                                   **{name: given[name] for name in entry.settings})
    if gate is not None:
        token_losses = token_losses * gate
    return aggregate(token_losses, agg, mask, horizon)


def clip_fractions(
    log_probs: Tensor, old_log_probs: Tensor, deltas: Tensor, clip_eps: float | Tensor
) -> tuple[Tensor, Tensor]:
    """Fractions of tokens whose clipped term has no gradient, split by side (TRL's low/high).

    low: rho < 1 - eps with delta < 0 (pushed down far enough already);
    high: rho > 1 + eps with delta > 0 (pushed up far enough already).
    Returns two float[...] (means over batch, trial, pos).
    """
    return ppo_clip_fractions(ratios(log_probs.detach(), old_log_probs), deltas.unsqueeze(-1), None, clip_eps)


def ppo_clip_fractions(ratio: Tensor, side: Tensor, mask: Tensor | None, clip_eps: float | Tensor
                       ) -> tuple[Tensor, Tensor]:
    """PPO's clip metrics (`clip_fractions`) from ratios float[... batch trial pos]: the clipped loss's and, as a
    diagnostic, every loss that names them in its entry (the loop calls them on whole blocks of steps).

    ratio may carry extra leading axes beyond the deltas' (the loop passes float[step epoch run batch trial pos]);
    side float[... batch trial 1] (one delta per response) or float[... batch trial pos] (one per token); with
    `mask` bool[... batch trial pos] the fractions are over live tokens.
    """
    eps = as_leading(clip_eps, ratio)
    if mask is not None:
        tokens = mask.sum(dim=TOKEN_AXES)
        low = ((ratio < 1 - eps) & (side < 0) & mask).sum(dim=TOKEN_AXES) / tokens
        high = ((ratio > 1 + eps) & (side > 0) & mask).sum(dim=TOKEN_AXES) / tokens
        return low, high
    never = torch.zeros((), dtype=ratio.dtype, device=ratio.device)  # a bound rho (>= 0) never falls below
    # each response's bound on its clipping side; on the other side a bound no ratio crosses
    low_bound = torch.where(side < 0, 1 - eps, never)  # float[... batch trial 1]
    high_bound = torch.where(side > 0, 1 + eps, never + math.inf)
    # laid out over pos like one slice of rho, the bounds meet rho in one contiguous pass (broadcast
    # over pos inside a token-sized comparison, it runs as many short strided loops)
    like = ratio[(0,) * (ratio.dim() - side.dim())]  # float[... batch trial pos]
    low = (ratio < torch.empty_like(like).copy_(low_bound.expand_as(like))).sum(dim=TOKEN_AXES)
    high = (ratio > torch.empty_like(like).copy_(high_bound.expand_as(like))).sum(dim=TOKEN_AXES)
    tokens = like.shape[-3] * like.shape[-2] * like.shape[-1]
    return low / tokens, high / tokens
