"""Policy-gradient surrogate losses; their gradients are the update.

With per-token log-probs l = log pi_theta(y_q | x), frozen l_old, deltas d
broadcast over positions, ratio rho = exp(l - l_old), and mean over
(batch, trial, pos):

    naive      L = -mean(l * d)
    unclipped  L = -mean(rho * d)
    clipped    L = -mean(min(min(rho, delta) * d, clip(rho, 1 - eps, 1 + eps_high) * d))
               (eps_high = eps and delta = inf unless set: PPO's clip; eps_high > eps is DAPO's clip-higher,
               arXiv 2503.14476; a finite delta caps the ratio of negative-delta tokens, INTELLECT-2's two-sided
               clip, arXiv 2505.07291)

A ratio is the token's (`importance_sampling_level` token), or its sequence's (sequence, GSPO, arXiv 2507.18071):
    s_i = exp(mean over the response's live tokens of (l - l_old)), one ratio for every token of the response.
The other descendants of the clip (CISPO, SAPO, LUSPO, VESPO) are `lab.core.descendants`.

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

import inspect
import math
from functools import cache

import torch
from torch import Tensor

from lab.core.aggregation import LossAgg, aggregate
from lab.core.choices import parse_choice
from lab.core.modes import TrainingLoss

DEFAULTS = {"sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05, "vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0,
            "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0}
"""TRL 1.16's defaults of the descendants' own settings (GRPOConfig; `lab.core.descendants`)."""

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


def log_ratios(log_probs: Tensor, old_log_probs: Tensor, mask: Tensor | None, level: str = "token") -> Tensor:
    """log rho per token, float[... batch trial pos]; at `level` sequence each token carries its response's mean
    log-ratio over live tokens (GSPO's log s_i; a response without live tokens has 0, as TRL's clamp(min=1))."""
    log_ratio = log_probs - old_log_probs.detach()
    if level == "token":
        return log_ratio
    if level != "sequence":
        raise ValueError(f"unknown importance_sampling_level {level!r}; choose one of: token, sequence")
    if mask is None:
        return log_ratio.mean(dim=-1, keepdim=True).expand_as(log_ratio)
    live = mask.to(log_ratio.dtype)
    mean = (log_ratio * live).sum(dim=-1, keepdim=True) / live.sum(dim=-1, keepdim=True).clamp(min=1.0)
    return mean.expand_as(log_ratio)


def naive(log_probs, token_deltas, old_log_probs, mask, **settings):
    return log_probs * -token_deltas  # = -(l * d) exactly; the sign on d keeps a node out of the graph


def unclipped(log_probs, token_deltas, old_log_probs, mask, importance_sampling_level="token", **settings):
    if importance_sampling_level == "token":
        return -(ratios(log_probs, old_log_probs) * token_deltas)
    return -(torch.exp(log_ratios(log_probs, old_log_probs, mask, importance_sampling_level)) * token_deltas)


def clipped(log_probs, token_deltas, old_log_probs, mask, clip_eps, epsilon_high=None, clip_delta=None,
            importance_sampling_level="token"):
    if importance_sampling_level == "token":
        rho = ratios(log_probs, old_log_probs)  # the lab's path since the lecture, bit for bit
    else:
        rho = torch.exp(log_ratios(log_probs, old_log_probs, mask, importance_sampling_level))
    eps = as_leading(clip_eps, rho)
    eps_high = eps if epsilon_high is None else as_leading(epsilon_high, rho)
    low, high = 1 - eps, 1 + eps_high
    if isinstance(low, Tensor) != isinstance(high, Tensor):  # clamp takes two numbers or two tensors
        low, high = (torch.as_tensor(b, dtype=rho.dtype, device=rho.device) for b in (low, high))
    clipped_rho = torch.clamp(rho, low, high)
    if clip_delta is not None:  # the two-sided clip: the unclipped term's ratio capped at delta (TRL's order)
        rho = torch.minimum(rho, torch.as_tensor(as_leading(clip_delta, rho), dtype=rho.dtype, device=rho.device))
    return -torch.minimum(rho * token_deltas, clipped_rho * token_deltas)


@cache
def default_level(entry) -> str:
    """A loss's own ratio level: the default of its surrogate's `importance_sampling_level` (luspo: sequence)."""
    parameter = inspect.signature(entry.surrogate.resolve()).parameters.get("importance_sampling_level")
    return "token" if parameter is None else parameter.default


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
    importance_sampling_level: str | None = None,
    **settings: float | Tensor | None,
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
    entropy mask). `importance_sampling_level`: token or sequence ratios (GSPO), for the losses whose entry reads it
    (None: the loss's own, token but for luspo's sequence).
    `settings`: any other field the loss's entry reads (`Loss.settings`); epsilon_high (None: clip_eps), clip_delta
    (None: no cap) and the descendants' own (`lab.core.descendants.DEFAULTS`, TRL's) may be left out. Returns
    float[...] (a scalar without leading axes).
    """
    entry = parse_mode(mode).entry
    if entry.needs_old and old_log_probs is None:
        raise ValueError(f"loss mode {entry.name!r} needs old_log_probs (the sampling policy's log-probs)")
    given = {"clip_eps": clip_eps, "importance_sampling_level": importance_sampling_level or default_level(entry),
             "epsilon_high": None,
             "clip_delta": None, **DEFAULTS, **settings}
    if given["epsilon_high"] is None:  # TRL's: epsilon_high falls back to epsilon (CISPO's cap too)
        given["epsilon_high"] = clip_eps
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


def ppo_clip_fractions(ratio: Tensor, side: Tensor, mask: Tensor | None, clip_eps: float | Tensor,
                       epsilon_high: float | Tensor | None = None, clip_delta=None, importance_sampling_level="token",
                       **unread) -> tuple[Tensor, Tensor]:
    """PPO's clip metrics (`clip_fractions`) from ratios float[... batch trial pos]: the clipped loss's and, as a
    diagnostic, every loss that names them in its entry (the loop calls them on whole blocks of steps).

    ratio may carry extra leading axes beyond the deltas' (the loop passes float[step epoch run batch trial pos]);
    side float[... batch trial 1] (one delta per response) or float[... batch trial pos] (one per token); with
    `mask` bool[... batch trial pos] the fractions are over live tokens. The high side's bound is 1 + epsilon_high
    (clip-higher; None: 1 + clip_eps). At `importance_sampling_level` sequence a token counts as clipped when its
    response's ratio s_i is (so the fractions are over tokens, each response weighing its length; TRL's are over
    responses). `clip_delta` clips no token's gradient away (it caps a ratio's weight), so it counts in neither.
    `unread`: the loss's other settings (SAPO's temperatures, VESPO's shape), which PPO's metrics do not read.
    """
    if importance_sampling_level != "token":
        ratio = torch.exp(log_ratios(ratio.log(), torch.zeros_like(ratio), mask, importance_sampling_level))
    eps = as_leading(clip_eps, ratio)
    eps_high = eps if epsilon_high is None else as_leading(epsilon_high, ratio)
    if mask is not None:
        tokens = mask.sum(dim=TOKEN_AXES)
        low = ((ratio < 1 - eps) & (side < 0) & mask).sum(dim=TOKEN_AXES) / tokens
        high = ((ratio > 1 + eps_high) & (side > 0) & mask).sum(dim=TOKEN_AXES) / tokens
        return low, high
    never = torch.zeros((), dtype=ratio.dtype, device=ratio.device)  # a bound rho (>= 0) never falls below
    # each response's bound on its clipping side; on the other side a bound no ratio crosses
    low_bound = torch.where(side < 0, 1 - eps, never)  # float[... batch trial 1]
    high_bound = torch.where(side > 0, 1 + eps_high, never + math.inf)
    # laid out over pos like one slice of rho, the bounds meet rho in one contiguous pass (broadcast
    # over pos inside a token-sized comparison, it runs as many short strided loops)
    like = ratio[(0,) * (ratio.dim() - side.dim())]  # float[... batch trial pos]
    low = (ratio < torch.empty_like(like).copy_(low_bound.expand_as(like))).sum(dim=TOKEN_AXES)
    high = (ratio > torch.empty_like(like).copy_(high_bound.expand_as(like))).sum(dim=TOKEN_AXES)
    tokens = like.shape[-3] * like.shape[-2] * like.shape[-1]
    return low / tokens, high / tokens
