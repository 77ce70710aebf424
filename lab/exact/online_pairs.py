"""The exact distribution of the lab's online DPO pair: a group's highest reward against its lowest.

A group is G i.i.d. draws from pi; its pair is (y_hi, y_lo), the first draw with the group's highest reward and the
first with its lowest, none when all G rewards are equal (`lab.training.preference_pairs.online_pairs`). With reward
levels u > l, level masses p_u = pi(r = u) and p_l, and c the mass strictly between them:

    P(y_hi = a, y_lo = b) = pi(a) pi(b) k(r_a, r_b)
    k(u, l) = P(max = u, min = l) / (p_u p_l)
            = sum_{i, j >= 1, i + j <= G} G! / (i! j! (G - i - j)!) p_u^(i-1) p_l^(j-1) c^(G-i-j)

(i draws at the top level, j at the bottom, the rest between). Given how many draws fall at each level, the draws at
a level are i.i.d. from pi restricted to it, so the first of them is a with probability pi(a) / p_u, independently
of the bottom level's draws. Every term of the sum is positive: no cancellation near a deterministic pi, where
P(max = u, min = l) written as differences of (F_u - F_l)^G would lose it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def reward_levels(rewards: Tensor) -> Tensor:
    """One-hot level of each response, float[... n L] over the distinct rewards L of the whole table, ascending."""
    levels = torch.unique(rewards)
    return (rewards.unsqueeze(-1) == levels).to(rewards.dtype)


def extreme_pair_weights(probs: Tensor, rewards: Tensor, group_size: int) -> Tensor:
    """k(r_a, r_b) float[... n n] (module docstring) where r_a > r_b, 0 elsewhere, for probs and rewards float[... n]:
    P(y_hi = a, y_lo = b) = probs[a] probs[b] k[a, b]."""
    if group_size < 2:
        raise ValueError(f"an online pair needs a group of at least 2, got {group_size}")
    onehot = reward_levels(rewards.to(probs))  # float[... n L]
    mass = (probs.unsqueeze(-2) @ onehot).squeeze(-2)  # float[... L]
    below_or_at = mass.cumsum(-1)
    between = ((below_or_at - mass).unsqueeze(-1) - below_or_at.unsqueeze(-2)).clamp_min(0)  # float[... L(u) L(l)]
    top, bottom = mass.unsqueeze(-1), mass.unsqueeze(-2)
    g = group_size
    k = torch.zeros_like(between)
    for i in range(1, g):
        for j in range(1, g - i + 1):
            count = math.factorial(g) / (math.factorial(i) * math.factorial(j) * math.factorial(g - i - j))
            k = k + count * top ** (i - 1) * bottom ** (j - 1) * between ** (g - i - j)
    level_count = mass.shape[-1]
    above = torch.ones(level_count, level_count, dtype=torch.bool, device=probs.device).tril(-1)  # u > l
    k = torch.where(above, k, torch.zeros((), dtype=k.dtype))
    return onehot @ k @ onehot.transpose(-1, -2)
