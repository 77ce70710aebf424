"""Supervised fine-tuning's loss, and the filters of expert iteration, as pure functions.

    sft_loss     L = -sum_{b,i,q} m l / sum_{b,i,q} m          l = log pi_theta(y_q | x, y_<q), m = live tokens
    keep         group-best:  R_i = max_j R_j  and  max_j R_j > min_j R_j    (all of a group's best; none if all tie)
                 threshold:   R_i >= tau

`sft_loss` is the negative log-likelihood of responses averaged over every completion token of a run's batch,
as TRL's SFTTrainer computes its cross-entropy (one mean over the batch's non-ignored tokens; a long response
weighs more than a short one). Expert iteration (CS336 assignment 5; rejection-sampling fine-tuning) takes
SFT steps on the responses of its own samples that `keep` accepts. With a 0/1 filter F(R) and a normaliser that
does not depend on the samples, the expected gradient of the kept responses' NLL at theta = theta_old is
-grad P(F(R) = 1): REINFORCE with the reward F (claim 31, docs/claims.md).

Any leading axes (such as `run`) are kept: the means are over the last three (batch trial pos).
"""

from __future__ import annotations

import torch
from torch import Tensor

TOKEN_AXES = (-3, -2, -1)  # batch trial pos


def sft_loss(log_probs: Tensor, mask: Tensor | None, weights: Tensor | None = None) -> Tensor:
    """-sum m w l / sum m w over (batch trial pos): float[...] from per-token log-probs float[... batch trial pos].

    mask: bool[... batch trial pos] live tokens (None: all); weights float[... batch trial]: 1 for a response
    that counts, 0 for one that does not (expert iteration's filter; None: all count). A run without a counted
    token has loss 0 and a zero gradient (Adam's momentum from earlier steps still moves it)."""
    live = token_weights(log_probs, mask, weights)
    return weighted_nll(log_probs, live, live.sum(dim=TOKEN_AXES).clamp_min(1))


def token_weights(log_probs: Tensor, mask: Tensor | None, weights: Tensor | None = None) -> Tensor:
    """m w, float[... batch trial pos] in log_probs' dtype (1 where a token counts, else 0): `sft_loss`'s weights."""
    live = torch.ones_like(log_probs) if mask is None else mask.to(log_probs.dtype)
    if weights is not None:
        live = live * weights.unsqueeze(-1).to(log_probs.dtype)
    return live


def weighted_nll(log_probs: Tensor, live: Tensor, tokens: Tensor) -> Tensor:
    """-sum m w l / tokens, float[...]: `sft_loss` with its token weights m w and max(1, sum m w) given (a training
    loop's epoch computes them once for its S steps)."""
    return -(log_probs * live).sum(dim=TOKEN_AXES) / tokens


def mean_log_prob(log_probs: Tensor, weights: Tensor | None = None) -> Tensor:
    """The counted responses' mean sequence log-prob, sum w sum_q l / sum w: float[...] from log-probs
    float[... batch trial pos] (0 on padding) and weights float[... batch trial] (None: all count); NaN without any."""
    count = torch.ones_like(log_probs[..., 0]) if weights is None else weights
    return weighted_mean_log_prob(log_probs, count, count.sum(dim=(-2, -1)))


def weighted_mean_log_prob(log_probs: Tensor, count: Tensor, responses: Tensor) -> Tensor:
    """`mean_log_prob` with its weights w and their sum given."""
    return (log_probs.sum(dim=-1) * count).sum(dim=(-2, -1)) / responses


def group_best(rewards: Tensor) -> Tensor:
    """1 for every response at its group's highest reward, where the group's rewards are not all equal:
    float[... batch trial] from rewards float[... batch trial]."""
    high, low = rewards.amax(dim=-1, keepdim=True), rewards.amin(dim=-1, keepdim=True)
    return ((rewards == high) & (high > low)).to(rewards.dtype)


def at_least(rewards: Tensor, threshold: Tensor | float) -> Tensor:
    """1 for every response whose reward reaches the threshold (float[...] per run, or one number)."""
    if isinstance(threshold, Tensor) and threshold.dim() > 0:
        threshold = threshold.reshape(*threshold.shape, *[1] * (rewards.dim() - threshold.dim())).to(rewards)
    return (rewards >= threshold).to(rewards.dtype)


def token_accuracy(predicted: Tensor, responses: Tensor, mask: Tensor | None, weights: Tensor | None = None) -> Tensor:
    """Fraction of the counted live tokens where the argmax token equals the response's: float[...].

    predicted, responses int[... batch trial pos] (predicted: each position's argmax given the response's
    prefix); NaN for a run without a counted token."""
    live = torch.ones_like(responses, dtype=torch.float32) if mask is None else mask.float()
    if weights is not None:
        live = live * weights.unsqueeze(-1).float()
    return accuracy_of(token_hits(predicted, responses, live), live.sum(dim=TOKEN_AXES))


def token_hits(predicted: Tensor, responses: Tensor, live: Tensor) -> Tensor:
    """The counted tokens (weights m w, float[... batch trial pos]) where the argmax is the response's token: float[...],
    a whole number, exact in any order of summation."""
    return ((predicted == responses).float() * live).sum(dim=TOKEN_AXES)


def position_counts(responses: Tensor, live: Tensor, vocab: int) -> Tensor:
    """sum_i m w [y_iq = v]: each token's counted weight at each position, float[... batch pos vocab], from responses
    int[... batch trial pos] and their token weights float[... batch trial pos]."""
    counts = live.new_zeros(*responses.shape[:-2], responses.shape[-1], vocab)
    return counts.scatter_add_(-1, responses.mT, live.mT)


def position_hits(counts: Tensor, log_softmax: Tensor) -> Tensor:
    """`token_hits` where each position's argmax does not depend on the response (the factorised policy):
    sum_{b,q} counts[b, q, argmax_v log_softmax[b, q, v]], float[...] from `position_counts` and the positions'
    log-softmaxes float[... batch pos vocab]. A whole number, as `token_hits`, so equal to it bit for bit."""
    # max's indices are argmax's (the first of tied maxima, NaN as the largest) at half its cost on the CPU
    return counts.gather(-1, log_softmax.max(dim=-1, keepdim=True).indices).sum(dim=TOKEN_AXES)


def accuracy_of(hits: Tensor, count: Tensor) -> Tensor:
    """hits / count, NaN where nothing is counted: float[...]."""
    return torch.where(count > 0, hits / count.clamp_min(1), torch.full_like(count, float("nan")))
