"""The exact expected update of a stale or mismatched sampler, with each correction, beside the on-policy one.

The factorised policy pi (per-position tables, logits z float[batch pos vocab]) is trained on responses y ~ mu (a
stale or mismatched sampler, the same class). At the epoch's first step pi_old = pi, so the surrogate's ratio is 1
and every PPO-style loss has the naive loss's gradient: with deltas d(y) and the gate W_t(y) of TRL's correction
(lab.core.importance: importance weight x off-policy mask), token-mean over the fixed length L,

    g(y)        = (d(y) / L) sum_t W_t(y) (e_{y_t} - pi_t)        the update one response gives, in logits
    u_mu        = sum_y mu(y) g(y)                                 what the step moves by in expectation
    u_pi        = sum_y pi(y) d(y) (1/L) sum_t (e_{y_t} - pi_t)    the on-policy update (mu = pi, W = 1)
    bias        = |u_mu - u_pi| / |u_pi|                           (Frobenius norms over pos and vocab)
    variance    = sum_y mu(y) |g(y)|^2 - |u_mu|^2                  of one response's update (its covariance's trace)

d(y) = r(y) (`--delta raw`, where the group does not enter) or r(y) - E_pi[r] (`baseline`, the large-G limit of
centered deltas). Without a correction W = 1 and u_mu weighs responses by mu instead of pi: the bias. Plain
importance weights pi / mu per response (sequence modes with no bounds) remove it exactly; per-token weights do
not (a token's weight corrects its own position only, and the delta depends on all of them); truncation leaves
the bias of the mass above C_max; masking removes those responses altogether. Everything is a sum over the V^L
responses (lab.exact.enumeration), in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lab.core.importance import importance_weights, off_policy_mask
from lab.core.modes import ImportanceSampling
from lab.exact.enumeration import all_responses


@dataclass(frozen=True)
class SamplerUpdate:
    mean: Tensor
    """float[batch pos vocab]: u_mu"""
    variance: Tensor
    """float[batch]: the trace of one response's update's covariance"""


def response_tables(position_log_probs: Tensor) -> tuple[Tensor, Tensor]:
    """Every response int[n pos] and its per-token log-probs float[batch n pos] under the tables float[batch pos
    vocab]."""
    batch, length, vocab = position_log_probs.shape
    responses = all_responses(vocab, length)
    index = responses.T.unsqueeze(0).expand(batch, -1, -1)  # int[batch pos n]
    return responses, position_log_probs.gather(-1, index).transpose(-1, -2)


def sampler_update(log_pi: Tensor, log_mu: Tensor, rewards: Tensor, correction: ImportanceSampling | str | None = None,
                   clip_min: float | None = None, clip_max: float | None = 3.0, mask_threshold: float | None = None,
                   baseline: bool = False) -> SamplerUpdate:
    """u_mu and its variance (module docstring): log_pi, log_mu float64[batch pos vocab] per-position log-probs,
    rewards float64[batch n] over `all_responses` (lab.exact.enumeration.reward_table)."""
    responses, token_pi = response_tables(log_pi)  # float[batch n pos]
    token_mu = response_tables(log_mu)[1]
    mu = token_mu.sum(-1).exp()  # float[batch n]
    deltas = rewards - (token_pi.sum(-1).exp() * rewards).sum(-1, keepdim=True) if baseline else rewards
    gate = torch.ones_like(token_pi)
    if correction is not None:
        gate = gate * importance_weights(token_pi, token_mu, correction, clip_min, clip_max)
    if mask_threshold is not None:
        gate = gate * off_policy_mask(deltas, token_pi, token_mu, mask_threshold)
    length, vocab = log_pi.shape[-2:]
    onehot = torch.nn.functional.one_hot(responses, vocab).to(log_pi)  # float[n pos vocab]
    scores = onehot - log_pi.exp().unsqueeze(1)  # float[batch n pos vocab]: e_{y_t} - pi_t
    updates = (deltas / length).unsqueeze(-1).unsqueeze(-1) * gate.unsqueeze(-1) * scores  # g(y)
    mean = (mu.unsqueeze(-1).unsqueeze(-1) * updates).sum(1)
    second = (mu * updates.pow(2).sum(dim=(-1, -2))).sum(-1)
    return SamplerUpdate(mean, second - mean.pow(2).sum(dim=(-1, -2)))


def relative_bias(update: Tensor, on_policy: Tensor) -> Tensor:
    """|u_mu - u_pi| / |u_pi| per prompt, float[batch] (updates float[batch pos vocab])."""
    return (update - on_policy).flatten(1).norm(dim=-1) / on_policy.flatten(1).norm(dim=-1)
