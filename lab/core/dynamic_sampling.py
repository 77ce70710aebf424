"""Dynamic sampling (DAPO, arXiv:2503.14476, section 3.2; verl's `algorithm.filter_groups`): a group whose rewards
are all equal has zero deltas under every group baseline, so it is dropped and drawn again.

    signal(g)      = [max_i r_i != min_i r_i]                       one prompt's group of G rewards
    redraw(g, n)   = not signal(g) and n < N                        n groups drawn for it so far, N the draw cap

The lab's prompts are a fixed set answered once per epoch, so a dropped group is drawn again *for its own prompt*
(DAPO draws new prompts from a data set): every epoch keeps the batch's shape, each prompt's group is its first
draw with signal, or its N-th draw when none of the N had one (that group is kept, with no signal: the cap's
price). The expected number of draws and the distribution of the kept group are `lab.exact.dynamic_sampling`.
"""

from __future__ import annotations

import torch
from torch import Tensor


def has_signal(rewards: Tensor) -> Tensor:
    """bool[... batch]: the group's rewards float[... batch trial] are not all equal."""
    return rewards.amax(dim=-1) != rewards.amin(dim=-1)


def needs_redraw(rewards: Tensor, draws: Tensor, max_draws: int) -> Tensor:
    """bool[... batch]: the group has no signal and fewer than `max_draws` groups were drawn for its prompt
    (`draws` int[... batch], at least 1: the first draw counts)."""
    return ~has_signal(rewards) & (draws < max_draws)


def replace_groups(kept: Tensor, fresh: Tensor, redraw: Tensor) -> Tensor:
    """`fresh` where `redraw`, else `kept`: tensors [... batch trial ...] with redraw bool[... batch]."""
    where = redraw.reshape(*redraw.shape, *(1,) * (kept.dim() - redraw.dim()))
    return torch.where(where, fresh, kept)
