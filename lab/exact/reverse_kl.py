"""The optimum of the reverse-KL objective: where GRPO with k3 in the loss goes (claim 14).

    J'_beta(pi) = sum_y pi(y) r(y) - beta KL(pi_ref || pi)                          per prompt
    pi'(y)      = beta pi_ref(y) / (lambda - r(y)),   lambda > max r the one root of sum_y pi'(y) = 1

Setting the derivative of the Lagrangian to 0 gives r(y) + beta pi_ref(y) / pi(y) = lambda; the sum over y
falls strictly from +inf (lambda -> max r over the support of pi_ref) to 0 (lambda -> inf), so the root is
unique and found by bisection on t = lambda - max r, in log t, to float64's relative resolution. Unlike
pi* = pi_ref exp(r / beta) / Z (the optimum of J_beta, `lab.exact.optimum`), pi' moves mass only in proportion
to pi_ref / (lambda - r): it never leaves a response with less than beta pi_ref(y) / (lambda - min r).

The expected update of GRPO with k3 in the loss and deltas of group scale s (1 raw, (G-1)/G centered) is
s grad J - beta grad KL(pi_ref || pi) = s grad J'_{beta / s}: its fixed point in the tabular class is pi'
at `effective_beta(beta, scale)`; with k2 in the loss it is pi* at the same effective beta, and with k1
in the reward pi* at beta itself (the scale multiplies the whole penalised reward). In the lab's loss the
policy-gradient term is a token mean over the C positions while the KL term sums them
(lab.core.aggregation.kl_term), so a run's scale is s / C (lab.exact.expected_update).
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
    gap = (top - rewards).clamp_min(0)  # 0 on the top set; exact, not lambda - r rounded at lambda's scale
    top_mass = torch.where(gap == 0, ref_probs, torch.zeros_like(ref_probs)).sum(-1, keepdim=True)
    # t = lambda - top, bisected geometrically: the sum is >= beta top_mass / t, so t >= beta top_mass, and it is
    # <= beta / t, so t <= beta. t can be far below top's rounding unit (pi_ref(top) = e^-34 gives t ~ 1e-16 beside
    # a top of 5), which a bisection on lambda itself cannot resolve.
    low, high = beta * top_mass, torch.full_like(top_mass, beta)

    def total(t: Tensor) -> Tensor:
        return (beta * ref_probs / (t + gap)).sum(-1, keepdim=True)

    for _ in range(BISECTIONS):
        middle = (low * high).sqrt()
        above = total(middle) > 1  # t too small
        low, high = torch.where(above, middle, low), torch.where(above, high, middle)
    probs = beta * ref_probs / (high + gap)
    return probs / probs.sum(-1, keepdim=True)


def reverse_objective(probs: Tensor, ref_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """J'_beta(pi) = sum_y pi r - beta KL(pi_ref || pi) per prompt: float[...], differentiable in probs."""
    kl = (torch.xlogy(ref_probs, ref_probs) - torch.xlogy(ref_probs, probs)).sum(-1)
    return (probs * rewards.to(probs)).sum(-1) - beta * kl
