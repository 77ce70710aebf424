"""The optimum of the reverse-KL objective: where GRPO with k3 in the loss goes (claim 14).

    J'_beta(pi) = sum_y pi(y) r(y) - beta KL(pi_ref || pi)                          per prompt
    pi'(y)      = beta pi_ref(y) / (lambda - r(y)),   lambda > max r the one root of sum_y pi'(y) = 1

Setting the derivative of the Lagrangian to 0 gives r(y) + beta pi_ref(y) / pi(y) = lambda; the sum over y
falls strictly from +inf (lambda -> max r over the support of pi_ref) to 0 (lambda -> inf), so the root is
unique and found by bisection to float64's resolution. Unlike pi* = pi_ref exp(r / beta) / Z (the
optimum of J_beta, `lab.exact.optimum`), pi' moves mass only in proportion to pi_ref / (lambda - r): it
never leaves a response with less than beta pi_ref(y) / (lambda - min r).

The expected update of GRPO with k3 in the loss and deltas of group scale s (1 raw, (G-1)/G centered) is
s grad J - beta grad KL(pi_ref || pi) = s grad J'_{beta / s}: its fixed point in the tabular class is pi'
at `effective_beta(beta, scale)`; with k2 in the loss it is pi* at the same effective beta, and with k1
in the reward pi* at beta itself (the scale multiplies the whole penalised reward).
"""

from __future__ import annotations

import torch
from torch import Tensor

BISECTIONS = 200
"""Halvings of the bracket for lambda: far past float64's 52 bits, so the root is exact to rounding."""


def effective_beta(beta: float, scale: float) -> float:
    """beta / s: the KL weight of the objective whose gradient the expected update is, divided by s."""
    return beta / scale


def reverse_optimum(ref_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """pi'(y) = beta pi_ref(y) / (lambda - r(y)) over the last axis: float[... n] (rows sum to 1)."""
    if not beta > 0:
        raise ValueError(f"the reverse-KL optimum needs beta > 0, got {beta}")
    rewards = rewards.to(ref_probs)
    top = torch.where(ref_probs > 0, rewards, torch.full_like(rewards, -torch.inf)).amax(-1, keepdim=True)
    low, high = top, top + beta  # sum_y beta pi_ref / (lambda - r) <= beta / (lambda - top) <= 1 at top + beta

    def total(lam: Tensor) -> Tensor:
        return (beta * ref_probs / (lam - rewards)).sum(-1, keepdim=True)

    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        above = total(middle) > 1  # lambda too small
        low, high = torch.where(above, middle, low), torch.where(above, high, middle)
    probs = beta * ref_probs / (high - rewards)
    return probs / probs.sum(-1, keepdim=True)


def reverse_objective(probs: Tensor, ref_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """J'_beta(pi) = sum_y pi r - beta KL(pi_ref || pi) per prompt: float[...], differentiable in probs."""
    kl = (torch.xlogy(ref_probs, ref_probs) - torch.xlogy(ref_probs, probs)).sum(-1)
    return (probs * rewards.to(probs)).sum(-1) - beta * kl
