"""Dynamic sampling's cost and the batch it keeps, exactly (DAPO arXiv:2503.14476; lab.core.dynamic_sampling).

For one prompt, with p_v = P(R = v) the reward distribution of one response and G responses per group,

    q        = sum_v p_v^G                                   P(a group has no signal: all rewards equal)
    S_N      = sum_{k<N} q^k = (1 - q^N) / (1 - q)           E[groups drawn] under a cap of N draws (N at q = 1)
    q^N                                                      P(the kept group has no signal: the cap was hit)
    P(kept = g) = p(g) (S_N [g has signal] + q^(N-1) [g has none])

so one response of the kept group has reward v with probability (p_v - p_v^G) S_N + p_v^G q^(N-1), and, since a
group without signal has zero deltas under every group baseline (centered, normalized, loo), the expected update of
the kept group is S_N times the plain one: dynamic sampling multiplies each prompt's expected update by its expected
cost S_N, up to 1 / (1 - q), which weighs the prompts where signal is rare the most. It changes no direction within
a prompt and adds no bias there; across prompts it reweighs.
"""

from __future__ import annotations

import torch
from torch import Tensor


def value_probs(probs: Tensor, rewards: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct reward values float[k] of `rewards` float[... n] and P(R = v) float[... k] under `probs`."""
    values = torch.unique(rewards)
    return values, (probs.unsqueeze(-1) * (rewards.unsqueeze(-1) == values)).sum(dim=-2)


def no_signal_probability(value_prob: Tensor, group_size: int) -> Tensor:
    """q = sum_v p_v^G: float[...] from p float[... k]."""
    return (value_prob ** group_size).sum(dim=-1)


def expected_draws(q: Tensor, cap: int) -> Tensor:
    """S_N = sum_{k < N} q^k, groups drawn per prompt in expectation (float[...] from q float[...])."""
    powers = q.unsqueeze(-1) ** torch.arange(cap, dtype=q.dtype, device=q.device)
    return powers.sum(dim=-1)  # the plain sum: exact at q = 1, where the closed form divides 0 by 0


def flat_kept_probability(q: Tensor, cap: int) -> Tensor:
    """q^N: the kept group has no signal (all N draws had none)."""
    return q ** cap


def kept_value_probs(value_prob: Tensor, group_size: int, cap: int) -> Tensor:
    """P(one response of the kept group has reward v) float[... k] from p float[... k]."""
    q = no_signal_probability(value_prob, group_size).unsqueeze(-1)
    flat = value_prob ** group_size
    return (value_prob - flat) * expected_draws(q, cap) + flat * q ** (cap - 1)
