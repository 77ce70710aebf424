"""Importance-sampling corrections for responses drawn by a sampler mu that is not the trained policy.

A stale sampler (the policy K optimizer steps behind, as in asynchronous RL) or a mismatched one (an inference
engine whose numbers differ from the trainer's) draws y ~ mu; the loss's old policy pi_old is the trainer's own.
TRL 1.16 (`vllm_importance_sampling_correction`, `vllm_importance_sampling_mode`) weighs every token's loss by

    log w_t = m_t (log pi_old(y_t) - log mu(y_t))       token-*:     one weight per token
    log w   = sum_t m_t (log pi_old(y_t) - log mu(y_t))  sequence-*:  one weight per response
    truncate   w <- clamp(w, C_min, C_max)               truncated importance sampling (TIS; C_min may be None)
    mask       w <- w * [C_min <= w <= C_max]            masked importance sampling (MIS; a missing bound is open)

with m the live-token mask. Truncation keeps every response and bounds its weight (less variance, the bias of
the clipped mass); masking drops the far-off responses whole (no weight above C_max, the bias of what it drops).

The off-policy sequence mask (DeepSeek-V3.2, arXiv:2512.02556, eq. 9; TRL's `off_policy_mask_threshold`) drops a
response whose advantage is negative and whose mean per-token log mu - log pi_theta exceeds delta:

    keep = [A >= 0] or [sum_t m_t (log mu(y_t) - log pi_theta(y_t)) / max(sum_t m_t, 1) <= delta]

Both are constants of the step (no gradient flows through them) that multiply each token's loss before the
aggregation (`lab.core.losses.compute_loss`'s `gate`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lab.core.choices import parse_choice
from lab.core.modes import ImportanceSampling


def importance_weights(old_log_probs: Tensor, sampling_log_probs: Tensor, mode: ImportanceSampling | str,
                       clip_min: float | None = None, clip_max: float | None = 3.0,
                       mask: Tensor | None = None) -> Tensor:
    """The weights w (detached): float[... batch trial pos] for the token modes, float[... batch trial 1] for the
    sequence modes. old_log_probs, sampling_log_probs float[... batch trial pos] (log pi_old and log mu of the
    sampled tokens); mask bool[... batch trial pos] of live tokens or None (all live)."""
    mode = parse_choice(ImportanceSampling, mode, "importance-sampling mode")
    log_w = (old_log_probs - sampling_log_probs).detach()
    if mask is not None:
        log_w = log_w * mask  # a padding token's weight is exp(0) = 1; its loss is masked anyway
    if mode.value.startswith("sequence"):
        log_w = log_w.sum(dim=-1, keepdim=True)
    w = torch.exp(log_w)
    if mode.value.endswith("truncate"):
        return torch.clamp(w, min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    return torch.where((w < low) | (w > high), torch.zeros_like(w), w)


def off_policy_mask(deltas: Tensor, log_probs: Tensor, sampling_log_probs: Tensor, threshold: float,
                    mask: Tensor | None = None) -> Tensor:
    """1 for a kept response, 0 for a dropped one: float[... batch trial 1]. deltas float[... batch trial] (each
    response's advantage), log_probs (log pi_theta, detached here) and sampling_log_probs (log mu) float[... batch
    trial pos], mask bool[... batch trial pos] or None."""
    kl = sampling_log_probs - log_probs.detach()
    if mask is None:
        mean_kl = kl.mean(dim=-1, keepdim=True)
    else:
        mean_kl = (kl * mask).sum(dim=-1, keepdim=True) / mask.sum(dim=-1, keepdim=True).clamp(min=1)
    keep = (deltas.unsqueeze(-1) >= 0) | (mean_kl <= threshold)
    return keep.to(log_probs.dtype)
