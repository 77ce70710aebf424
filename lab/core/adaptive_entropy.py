"""Adaptive entropy control (Skywork-OR1, He et al., arXiv:2505.22312, section 3.2; TRL's `use_adaptive_entropy`).

The entropy bonus's coefficient c moves each optimizer step to hold a target entropy H*: with H the step's mean
per-token entropy,

    c <- min(c + delta, c_max)   if H <= H*          (too little entropy: push harder)
    c <- max(c - delta, c_min)   otherwise
    applied = c if H_last <= H* else 0               the bonus acts only while the entropy is at or below target

where H_last is the entropy measured at the previous step (TRL: +inf before the first, so the first step applies
no bonus) and the step's own bonus uses the coefficient from before its update. TRL's defaults: c_0 =
`entropy_coef`, delta = 0.005, c_min = 0, c_max = 1, H* = 0.2.
"""

from __future__ import annotations

import torch
from torch import Tensor


def next_entropy_coef(coef: Tensor, entropy: Tensor, target: float | Tensor, delta: float | Tensor,
                      coef_min: float | Tensor, coef_max: float | Tensor) -> Tensor:
    """The coefficient after a step that measured `entropy`: float[run] from coef, entropy float[run]."""
    up = torch.minimum(coef + delta, torch.as_tensor(coef_max, dtype=coef.dtype, device=coef.device))
    down = torch.maximum(coef - delta, torch.as_tensor(coef_min, dtype=coef.dtype, device=coef.device))
    return torch.where(entropy <= target, up, down)


def applied_entropy_coef(coef: Tensor, last_entropy: Tensor, target: float | Tensor) -> Tensor:
    """The coefficient the step's loss uses: coef where the last measured entropy is at or below the target, else 0
    (float[run])."""
    return torch.where(last_entropy <= target, coef, torch.zeros_like(coef))
