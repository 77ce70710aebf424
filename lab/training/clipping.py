"""Clipping each run's gradient to a global norm inside a batched computation (`--max-grad-norm`).

    n_r = sqrt(sum over run r's parameters p and their entries of g_p^2)        (the pre-clip `grad_norm`)
    c_r = min(1, N_r / (n_r + 1e-6));   g_p <- c_r g_p   for every parameter of run r

torch's `clip_grad_norm_` (and TRL's `max_grad_norm`, verl's `grad_clip`) applied to each run alone: one
norm over all of a run's parameters, never per tensor, so the gradient keeps its direction and only its
length shrinks (claim 29, docs/claims.md). A run without a limit has N_r = inf, so c_r = 1 and its gradient is
untouched bit for bit; a batch where no run clips makes no `GradClip` at all, so its files are unchanged.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

CLIP_EPS = 1e-6
"""Added to the norm before dividing, as torch.nn.utils.clip_grad_norm_ does."""


def run_grad_norms(grads: list[Tensor]) -> Tensor:
    """Each run's global gradient norm, float[run], from gradients float[run ...] (one per parameter): each
    parameter's norm over its own axes in its memory order, then sqrt of the sum of their squares. A speed path
    over the plain `plain_run_grad_norms` (the same norms to float32 rounding: a test): no copy of a transposed
    gradient (the decode matrix) into logical order and no generic reduction over the run axis, which made
    --max-grad-norm cost 11% of a 500-run GRPO step by instruction count (cachegrind)."""
    squares = [torch.linalg.vector_norm(g, dim=tuple(range(1, g.dim()))) ** 2 for g in grads]  # float[run] each
    return torch.stack(squares).sum(dim=0).sqrt() if len(squares) > 1 else squares[0].sqrt()


def plain_run_grad_norms(grads: list[Tensor]) -> Tensor:
    """`run_grad_norms` written plainly: each run's gradients flattened into one vector, its L2 norm."""
    return torch.stack([torch.cat([g[r].reshape(-1) for g in grads]).norm() for r in range(len(grads[0]))])


def clip_coefficients(norms: Tensor, max_norms: Tensor) -> Tensor:
    """c_r = min(1, N_r / (n_r + 1e-6)), float[run] (1 where N_r = inf)."""
    return (max_norms / (norms + CLIP_EPS)).clamp(max=1.0)


class GradClip:
    """Clips every run's gradient in place before its Adam step and keeps each step's pre-clip norm.

    `log`: name -> one float[step run] per epoch: `grad_norm` (TRL's name) and `grad_clipped` (1 where
    that step's gradient was scaled down: its mean over steps is the fraction of steps clipped)."""

    def __init__(self, max_norms: list[float | None], device: torch.device) -> None:
        self.max_norms = torch.tensor([math.inf if n is None else n for n in max_norms], device=device)
        self.log: dict[str, list[Tensor]] = {"grad_norm": [], "grad_clipped": []}
        self.norms: list[Tensor] = []

    @classmethod
    def of(cls, max_norms: list[float | None], device: torch.device) -> GradClip | None:
        """A clipper for the batch, or None where no run clips."""
        return None if all(n is None for n in max_norms) else cls(max_norms, device)

    def __call__(self, parameters: list[Tensor]) -> None:
        grads = [p.grad for p in parameters]
        norms = run_grad_norms(grads)  # float[run]
        coef = clip_coefficients(norms, self.max_norms).to(grads[0].dtype)
        torch._foreach_mul_(grads, [coef.view(-1, *[1] * (g.dim() - 1)) for g in grads])
        self.norms.append(norms)

    def end_epoch(self) -> None:
        norms = torch.stack(self.norms)  # float[step run]
        self.log["grad_norm"].append(norms)
        self.log["grad_clipped"].append((norms + CLIP_EPS > self.max_norms).to(norms.dtype))
        self.norms = []
