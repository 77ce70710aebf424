"""The exact expected-update flow: where a method goes, decided without seeds or a training budget.

    d theta / d tau = -grad L(theta) / |grad L(theta)|        (L: the method's exact population loss)

Dividing by |grad L| changes how fast the gradient flow moves along its path, never the path, so the
flow's end is the gradient flow's limit: a stationary point of L where it has one, and where L has no
finite minimiser (DPO under argmax preferences, claim 28) the direction the flow leaves in. The flow
is integrated by Euler steps of length at most `FlowConfig.step` (shorter where a step would raise L:
halved until it does not, then allowed to grow again, never past `step`), so its path is the
gradient flow's to O(step). It stops, `converged`, when L <= `loss_tolerance` or |grad L| <=
`grad_tolerance`, and otherwise after `max_steps` steps (or when a step would have to be shorter than
`min_step`), not converged. Deterministic: no sampling anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class FlowConfig:
    """How far the flow runs and how finely (module docstring)."""

    step: float = 0.02
    """the longest Euler step, in parameter space (the path's resolution)"""
    loss_tolerance: float = 1e-9
    """converged when L is at most this (for a loss whose infimum is 0)"""
    grad_tolerance: float = 1e-9
    """converged when |grad L| is at most this (a stationary point)"""
    max_steps: int = 200_000
    """steps at most"""
    min_step: float = 1e-12
    """a step that must be shorter than this ends the flow (not converged unless a tolerance holds)"""


@dataclass(frozen=True)
class Flow:
    """Where the flow stopped."""

    theta: Tensor
    """the parameters there (detached)"""
    loss: float
    grad_norm: float
    steps: int
    converged: bool
    """whether `loss_tolerance` or `grad_tolerance` held before `max_steps` or `min_step`"""


def _value_and_grad(loss: Callable[[Tensor], Tensor], theta: Tensor) -> tuple[float, Tensor]:
    theta = theta.detach().requires_grad_(True)
    value = loss(theta)
    return float(value.detach()), torch.autograd.grad(value, theta)[0]


def descend(loss: Callable[[Tensor], Tensor], theta: Tensor, config: FlowConfig = FlowConfig()) -> Flow:
    """Follow -grad L / |grad L| from `theta` (float64 recommended) until a tolerance holds or the steps run out."""
    theta = theta.detach().clone()
    value, grad = _value_and_grad(loss, theta)
    step, steps = config.step, 0
    while steps < config.max_steps:
        norm = float(grad.norm())
        if value <= config.loss_tolerance or norm <= config.grad_tolerance:
            return Flow(theta, value, norm, steps, True)
        candidate = theta - step * grad / norm
        new_value, new_grad = _value_and_grad(loss, candidate)
        if new_value > value:  # overshot a minimum along the direction: a shorter step
            step /= 2
            if step < config.min_step:
                break
            continue
        theta, value, grad, steps = candidate, new_value, new_grad, steps + 1
        step = min(config.step, step * 1.5)
    norm = float(grad.norm())
    return Flow(theta, value, norm, steps, value <= config.loss_tolerance or norm <= config.grad_tolerance)
