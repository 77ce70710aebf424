"""Which tokens a policy-gradient loss trains on: the top-entropy gate and the truncation mask.

    top-entropy   g_t = [H_t >= q_{1 - rho}(H)],  q the (1 - rho)-quantile of the entropies H of the batch's live
                  tokens (linear interpolation, torch.quantile's), rho = --top-entropy-quantile: only the top-rho
                  share of tokens by entropy keep their gradient ("Beyond the 80/20 rule", arXiv 2506.01939; TRL's
                  `top_entropy_quantile`); rho = 1 keeps every token
    truncation    m'_bt = m_bt * [y_bt ends with EOS]: a response cut off at the length cap leaves the loss, its
                  tokens out of every denominator (DAPO's overlong filtering, arXiv 2503.14476; TRL's
                  `mask_truncated_completions`)

The gate multiplies each token's loss and leaves the aggregation's denominators alone (TRL's `entropy_mask`); the
truncation mask replaces the live-token mask of the loss and its KL term. Any leading axes (such as `run`) are
kept: the quantile is each leading index's own.
"""

from __future__ import annotations

import torch
from torch import Tensor

TOKEN_AXES = (-3, -2, -1)  # batch trial pos


def top_entropy_gate_plain(entropies: Tensor, mask: Tensor | None, quantile: float) -> Tensor:
    """The plain version, one leading index: entropies float[batch trial pos] -> bool[batch trial pos]."""
    live = torch.ones_like(entropies, dtype=torch.bool) if mask is None else mask.bool()
    values = entropies[live]
    if values.numel() == 0:
        return torch.zeros_like(live)
    threshold = torch.quantile(values, 1 - quantile)
    return (entropies >= threshold) & live


def top_entropy_gate(entropies: Tensor, mask: Tensor | None, quantile: float | Tensor) -> Tensor:
    """bool[... batch trial pos]: the live tokens whose entropy reaches the (1 - quantile)-quantile of their leading
    index's live entropies. entropies float[... batch trial pos]; quantile a float or float[...] per leading index.
    All leading indices at once: the live entropies sorted (padding pushed last as +inf) and the quantile
    interpolated as torch.quantile does (tested equal to `top_entropy_gate_plain`)."""
    live = torch.ones_like(entropies, dtype=torch.bool) if mask is None else mask.bool()
    lead = entropies.shape[:-3]
    flat = torch.where(live, entropies, torch.full_like(entropies, float("inf"))).reshape(*lead, -1)
    ordered = flat.sort(dim=-1).values
    count = live.reshape(*lead, -1).sum(dim=-1)  # int[...]
    q = torch.as_tensor(quantile, dtype=entropies.dtype, device=entropies.device).expand(lead)
    position = (1 - q) * (count - 1).clamp(min=0).to(entropies.dtype)
    below = position.floor()
    low = ordered.gather(-1, below.long().unsqueeze(-1)).squeeze(-1)
    high = ordered.gather(-1, position.ceil().long().unsqueeze(-1)).squeeze(-1)
    threshold = torch.lerp(low, high, position - below) if entropies.is_floating_point() else low
    threshold = torch.where(position == below, low, threshold)  # an exact order statistic, no 0 * inf
    gate = (entropies >= threshold.reshape(*lead, 1, 1, 1)) & live
    return gate & (count > 0).reshape(*lead, 1, 1, 1)


def untruncated(responses: Tensor, mask: Tensor, eos: int) -> Tensor:
    """bool[... batch trial pos]: the live-token mask with every truncated response's row cleared. A response is
    truncated when its last position is live and not EOS (it reached the cap without ending)."""
    truncated = mask[..., -1] & (responses[..., -1] != eos)  # bool[... batch trial]
    return mask & ~truncated.unsqueeze(-1)
