"""The exact expected-update flow: where a method goes, decided without seeds or a training budget.

    d theta / d tau = -grad L(theta) / |grad L(theta)|        (L: the method's exact population loss)

Dividing by |grad L| changes how fast the gradient flow moves along its path, never the path, so the
flow's end is the gradient flow's limit: a stationary point of L where it has one, and where L has no
finite minimiser (DPO under argmax preferences, claim 28) the direction the flow leaves in. The flow
is integrated by Euler steps of length at most `FlowConfig.step` (shorter where a step would raise L:
halved until it does not, then allowed to grow again, never past `step`), so its path is the
gradient flow's to O(step). Problems that do not interact (one per prompt, axis `batch`) flow side by
side, each row normalised by its own gradient: theta float[... n], L returning float[...] per row.
A row stops, `converged`, when its L <= `loss_tolerance` or |grad L| <= `grad_tolerance`; it stops
unconverged when a step would have to be shorter than `min_step` (a stall), and every row stops after
`max_steps` steps. The gradient test is stationarity to a tolerance, not nearness: where L has no finite
minimiser or a flat tail it holds far from the infimum (offline Bradley-Terry DPO: |grad L| 4.4e-6 with
KL(end || pi*) still 15.5); a distance needs the path criterion of `lab.exact.update_flow`
(tests/exact/test_flow_stops.py). Deterministic: no sampling anywhere.
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
    """the longest Euler step of a row, in parameter space (the path's resolution)"""
    loss_tolerance: float = 1e-9
    """a row has converged when its L is at most this (for a loss whose infimum is 0)"""
    grad_tolerance: float = 1e-9
    """a row has converged when its |grad L| is at most this (a stationary point)"""
    max_steps: int = 200_000
    """steps at most"""
    min_step: float = 1e-12
    """a row whose step must be shorter than this stops (not converged unless a tolerance holds)"""


@dataclass(frozen=True)
class Flow:
    """Where the flow stopped, per row."""

    theta: Tensor
    """the parameters there, float[... n] (detached)"""
    loss: Tensor
    """float[...]"""
    grad_norm: Tensor
    """float[...]"""
    steps: int
    converged: Tensor
    """bool[...]: whether `loss_tolerance` or `grad_tolerance` held"""


def _value_and_grad(loss: Callable[[Tensor], Tensor], theta: Tensor) -> tuple[Tensor, Tensor]:
    theta = theta.detach().requires_grad_(True)
    value = loss(theta)
    return value.detach(), torch.autograd.grad(value.sum(), theta)[0]  # rows do not interact: each its own gradient


def descend(loss: Callable[[Tensor], Tensor], theta: Tensor, config: FlowConfig = FlowConfig()) -> Flow:
    """Follow -grad L / |grad L| row by row from `theta` (float64 recommended) until every row has stopped."""
    theta = theta.detach().clone()
    value, grad = _value_and_grad(loss, theta)
    step = torch.full_like(value, config.step)

    def reached(value: Tensor, grad: Tensor) -> Tensor:
        return (value <= config.loss_tolerance) | (grad.norm(dim=-1) <= config.grad_tolerance)

    done, steps = reached(value, grad), 0
    while steps < config.max_steps and not bool(done.all()):
        direction = grad / grad.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(grad.dtype).tiny)
        candidate = theta - torch.where(done, 0.0, step).unsqueeze(-1) * direction
        new_value, new_grad = _value_and_grad(loss, candidate)
        worse = (new_value > value) & ~done  # overshot a minimum along the direction: a shorter step
        accept = ~worse & ~done
        theta = torch.where(accept.unsqueeze(-1), candidate, theta)
        value, grad = torch.where(accept, new_value, value), torch.where(accept.unsqueeze(-1), new_grad, grad)
        step = torch.where(worse, step / 2, (step * 1.5).clamp_max(config.step))
        done = done | reached(value, grad) | (step < config.min_step)
        steps += 1
    return Flow(theta, value, grad.norm(dim=-1), steps, reached(value, grad))
