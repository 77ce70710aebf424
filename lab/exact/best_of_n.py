"""Best-of-n, exactly: draw n responses from pi, keep the one a scorer ranks highest.

For one prompt, responses y with base probabilities pi(y) and scores s(y) (a proxy reward model, or
the true reward). Group the responses into score levels; with F(v) = P_pi(s(y) <= v), F(v-) = P_pi(s(y) < v)
and pi(v) = P_pi(s(y) = v), the best of n i.i.d. draws has a score of level v with probability
F(v)^n - F(v-)^n. **Tie rule**: among the draws that share the best score, one is kept uniformly at
random, so within a level the kept response is distributed as pi restricted to the level:

    p_n(y) = pi(y) / pi(s(y)) * (F(s(y))^n - F(s(y)-)^n)

    KL(p_n || pi) = sum over levels v of  q_v log(q_v / pi(v)),     q_v = F(v)^n - F(v-)^n

(the KL depends on the levels only: within a level p_n / pi is constant). Beirami et al. (2024),
"Theoretical guarantees on the best-of-n alignment policy", show KL(p_n || pi) <= log n - (n-1)/n, the
value Gao et al. (2023) use as best-of-n's KL; it is reached only when no level carries much
probability (a continuous score), and on a small discrete space the exact KL falls below it.

Everything is float64 and batched over prompts: `float[batch n]` tables.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def level_cdfs(probs: Tensor, scores: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per response: F(s(y)), F(s(y)-) and pi(s(y)), each float64[batch n] (levels = exactly equal scores)."""
    probs, scores = probs.double(), scores.double()
    same = scores.unsqueeze(-1) == scores.unsqueeze(-2)  # bool[batch n n]: y' in the level of y
    below = scores.unsqueeze(-1) > scores.unsqueeze(-2)  # y' strictly below y
    level = (same * probs.unsqueeze(-2)).sum(-1)
    under = (below * probs.unsqueeze(-2)).sum(-1)
    return (under + level).clamp(max=1.0), under, level


def best_of_n_probs(probs: Tensor, scores: Tensor, n: int) -> Tensor:
    """p_n(y) float64[batch n] of best-of-n under `scores`, ties broken uniformly (module docstring)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"best-of-n needs an integer n >= 1, got {n!r}")
    at_or_below, below, level = level_cdfs(probs, scores)
    mass = at_or_below ** n - below ** n  # P(the best score is this level)
    return torch.where(level > 0, probs.double() / level.clamp(min=1e-300) * mass, torch.zeros_like(mass))


def best_of_n_kl(probs: Tensor, scores: Tensor, n: int) -> Tensor:
    """KL(p_n || pi) float64[batch], exactly: sum over responses of p_n log(p_n / pi)."""
    best = best_of_n_probs(probs, scores, n)
    ratio = torch.where(best > 0, best / probs.double().clamp(min=1e-300), torch.ones_like(best))
    return (best * ratio.log()).sum(-1)


def kl_bound(n: int) -> float:
    """log n - (n-1)/n: Beirami et al.'s upper bound on best-of-n's KL, the value Gao et al. (2023) use."""
    return math.log(n) - (n - 1) / n


def expectation(probs: Tensor, values: Tensor) -> Tensor:
    """E_p[values] float64[batch] for a distribution float[batch n] (gold or proxy reward under p_n)."""
    return (probs.double() * values.double()).sum(-1)
