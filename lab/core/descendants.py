"""GRPO's descendants: the per-token losses TRL 1.16 offers besides PPO's clip (`--loss cispo|sapo|luspo|vespo`).

With l = log pi_theta(y_t | ...), rho the ratio of `importance_sampling_level` (`lab.core.losses.log_ratios`:
the token's, or its response's GSPO ratio), d the delta and sg(.) a stop-gradient:

    cispo  L_t = -sg(min(rho, eps_max)) * d * l                         MiniMax-M1, arXiv 2506.13585
           every token keeps its log-prob gradient; only its weight is capped (eps_max = --epsilon-high,
           TRL's and ScaleRL's absolute cap, arXiv 2510.13786)
    sapo   L_t = -(4 / tau) * sigmoid(tau * (rho - 1)) * d              SAPO, arXiv 2511.20347
           tau = tau_pos where d > 0, else tau_neg: a soft gate whose gradient rho * sigmoid'(.) * 4 d is d * rho
           at rho = 1 (the plain gradient) and falls smoothly away from it, in place of the hard clip
    luspo  L_t = GSPO's clipped loss, sequence ratios s_i                LUSPO, arXiv 2602.05261
           summed over each response's tokens (`--loss-agg seq-mean-token-sum`): each response weighs its length
    vespo  L_t = -sg(phi(w_i)) * d * l,  w_i = exp(sum_t (l - l_old))  VESPO, arXiv 2602.10693
           phi(w) = exp(lam + k log w - lam w) = e^lam w^k e^(-lam w), phi(1) = 1, (k, lam) = (k_pos, lam_pos)
           where d >= 0, else (k_neg, lam_neg); w of the whole sequence's summed log-ratio (not GSPO's mean)

SAPO and VESPO clip nothing: their clip metrics are PPO's, a diagnostic of how far the ratios went (as naive's).
Each is a surrogate of the `TrainingLoss` table (`lab.core.modes`), with TRL's defaults in `lab.core.losses.DEFAULTS`. Every
formula follows TRL 1.16.0's `GRPOTrainer._compute_loss` (tests/bridge/test_trl_descendants_parity.py), including
its clamps (VESPO's log-ratios to [-20, 20], log w to [log 1e-8, 20]; a non-finite phi is 0).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lab.core.losses import TOKEN_AXES, as_leading, clipped, log_ratios

LOG_W_FLOOR = math.log(1e-8)


def cispo(log_probs, token_deltas, old_log_probs, mask, epsilon_high, importance_sampling_level="token"):
    rho = torch.exp(log_ratios(log_probs, old_log_probs, mask, importance_sampling_level))
    weight = torch.minimum(rho, torch.as_tensor(as_leading(epsilon_high, rho), dtype=rho.dtype, device=rho.device))
    return -(weight.detach() * token_deltas) * log_probs


def sapo(log_probs, token_deltas, old_log_probs, mask, sapo_temperature_pos, sapo_temperature_neg,
         importance_sampling_level="token", clip_eps=None):  # clip_eps: read by its PPO clip diagnostics only
    rho = torch.exp(log_ratios(log_probs, old_log_probs, mask, importance_sampling_level))
    pos, neg = as_leading(sapo_temperature_pos, rho), as_leading(sapo_temperature_neg, rho)
    tau = torch.where(token_deltas > 0, torch.as_tensor(pos, dtype=rho.dtype, device=rho.device),
                      torch.as_tensor(neg, dtype=rho.dtype, device=rho.device))
    return -(torch.sigmoid(tau * (rho - 1)) * 4 / tau) * token_deltas


def luspo(log_probs, token_deltas, old_log_probs, mask, clip_eps, epsilon_high=None, clip_delta=None,
          importance_sampling_level="sequence"):
    # TRL's luspo takes its level from the config; LUSPO (and the lab's config) is sequence level
    return clipped(log_probs, token_deltas, old_log_probs, mask, clip_eps, epsilon_high, clip_delta,
                   importance_sampling_level)


def gamma_weights(log_probs: Tensor, old_log_probs: Tensor, side: Tensor, mask: Tensor | None,
                  k_pos, lambda_pos, k_neg, lambda_neg) -> Tensor:
    """VESPO's phi(w_i), constant, float[... batch trial 1] (pos where `side` is per token): w_i of the response's
    summed (clamped) log-ratios; side float[... batch trial 1 or pos] the deltas, whose sign picks (k, lam)."""
    with torch.no_grad():
        log_ratio = (log_probs - old_log_probs).clamp(-20.0, 20.0)
        if mask is not None:
            log_ratio = log_ratio * mask.to(log_ratio.dtype)
        log_w = log_ratio.sum(dim=-1, keepdim=True).clamp(LOG_W_FLOOR, 20.0)
        positive = side >= 0
        like = lambda v: torch.as_tensor(as_leading(v, log_w), dtype=log_w.dtype, device=log_w.device)  # noqa: E731
        k = torch.where(positive, like(k_pos), like(k_neg))
        lam = torch.where(positive, like(lambda_pos), like(lambda_neg)).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))
        return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def vespo(log_probs, token_deltas, old_log_probs, mask, vespo_k_pos, vespo_lambda_pos, vespo_k_neg,
          vespo_lambda_neg, clip_eps=None):  # clip_eps: read by its PPO clip diagnostics only
    phi = gamma_weights(log_probs, old_log_probs, token_deltas, mask, vespo_k_pos, vespo_lambda_pos, vespo_k_neg,
                        vespo_lambda_neg)
    return -(phi * token_deltas) * log_probs


def cispo_clip_fractions(ratio: Tensor, side: Tensor, mask: Tensor | None, epsilon_high, clip_eps=None,
                         importance_sampling_level="token") -> tuple[Tensor, Tensor]:
    """CISPO's clip metric (TRL's `cispo_clip_ratio`): (0, the fraction of live tokens with d > 0 whose weight
    min(rho, eps_max) was capped). A capped token keeps its gradient, scaled by eps_max / rho: unlike PPO's clipped
    tokens it is not dropped. ratio float[... batch trial pos] per token (1 on padding)."""
    if importance_sampling_level != "token":
        ratio = torch.exp(log_ratios(ratio.log(), torch.zeros_like(ratio), mask, importance_sampling_level))
    capped = (ratio > as_leading(epsilon_high, ratio)) & (side > 0)
    live = torch.ones_like(ratio, dtype=torch.bool) if mask is None else mask
    high = (capped & live).sum(dim=TOKEN_AXES) / live.sum(dim=TOKEN_AXES)
    return torch.zeros_like(high), high

