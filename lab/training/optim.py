"""Adam, and plain SGD, with a learning rate per run (`OPTIMIZERS`: one entry per `lab.core.modes.Optimizer`).

    SGD:  theta <- theta - lr_r * g            (torch.optim.SGD without momentum: the step scales with g)

    m <- b1 m + (1 - b1) g            v <- b2 v + (1 - b2) g^2
    u <- m / (1 - b1^t) / (sqrt(v) / sqrt(1 - b2^t) + eps)
    theta <- theta - lr_r * u

torch's Adam (no weight decay, no amsgrad), but `lr` is float[run] broadcast over
each parameter's leading run axis, so a sweep over learning rates is still one
batched update. Adam is elementwise, so runs never couple. For speed, torch's
fused Adam kernel (one pass over all tensors) computes -u into a scratch buffer
with lr = 1, then each run's lr scales it; where that kernel is missing (torch
< 2.4) the same formula runs as multi-tensor (_foreach) operations.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lab.core.modes import Optimizer


def memory_order(t: Tensor) -> list[int] | None:
    """The axis order in which t is laid out in memory (largest stride first), or None if it is t's own.

    A parameter stored permuted (PolicyStack.decode) is viewed in that order, where it is contiguous:
    torch's fused Adam would otherwise copy it in and out on every step. Gradients share the
    parameter's layout (autograd's layout contract), so the same view fits them. The storage is a
    speed path, measured in `lab.policies.factorized.PolicyStack` (5-7% of the 500-run row) and
    `lab.policies.autoregressive.AutoregressiveStack` (about 20% of the autoregressive one).
    """
    order = sorted(range(t.dim()), key=lambda axis: -t.stride(axis))
    return None if order == list(range(t.dim())) else order


class RunAdam:
    def __init__(self, params: list[Tensor], lr: Tensor, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = list(params)
        self.orders = [memory_order(p) for p in self.params]
        self.permuted = [(i, order) for i, order in enumerate(self.orders) if order is not None]
        # the same storage without autograd (so updating it in place needs no torch.no_grad() per step),
        # each viewed in its memory order
        self.values = [self._view(p.detach(), order) for p, order in zip(self.params, self.orders)]
        self.lr = lr  # float[run]
        self.betas, self.eps = betas, eps
        self.t = 0
        self.m = [torch.zeros_like(p) for p in self.values]
        self.v = [torch.zeros_like(p) for p in self.values]
        self.updates = [torch.zeros_like(p) for p in self.values]  # scratch: -u of the latest step
        # the run axis has the largest stride, so it stays first in every view
        self.lr_views = [lr.view(-1, *[1] * (p.dim() - 1)) for p in self.values]  # float[run 1 ...]
        self.fused = hasattr(torch, "_fused_adam_")
        # the fused kernel reads t from one tensor per parameter; they all share one (one add per step)
        self.state_step = torch.zeros((), device=lr.device)
        self.state_steps = [self.state_step] * len(self.params)

    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        grads = [p.grad for p in self.params]
        for i, order in self.permuted:
            grads[i] = grads[i].permute(order)
        if self.fused:
            torch._foreach_zero_(self.updates)
            self.state_step.add_(1)
            torch._fused_adam_(self.updates, grads, self.m, self.v, [], self.state_steps, lr=1.0, beta1=b1,
                               beta2=b2, weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False)
        else:
            bias1, bias2_sqrt = 1 - b1 ** self.t, math.sqrt(1 - b2 ** self.t)
            torch._foreach_lerp_(self.m, grads, 1 - b1)
            torch._foreach_mul_(self.v, b2)
            torch._foreach_addcmul_(self.v, grads, grads, value=1 - b2)
            denoms = torch._foreach_sqrt(self.v)
            torch._foreach_div_(denoms, bias2_sqrt)
            torch._foreach_add_(denoms, self.eps)
            self.updates = torch._foreach_div(self.m, denoms)
            torch._foreach_mul_(self.updates, -1 / bias1)
        torch._foreach_addcmul_(self.values, self.updates, self.lr_views)  # theta += lr_r * (-u)

    @staticmethod
    def _view(t: Tensor, order: list[int] | None) -> Tensor:
        return t if order is None else t.permute(order)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


class RunSGD:
    """Plain SGD with a learning rate per run: theta <- theta - lr_r g. Its step scales with the gradient, so
    clipping the gradient's norm bounds it, where Adam's normalisation makes the step about lr whatever the norm
    (the Before RL section's clipping verdict needs a setting where clipping can matter). `betas` and `eps` are
    Adam's and ignored, so both take the same arguments."""

    def __init__(self, params: list[Tensor], lr: Tensor, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = list(params)
        self.values = [p.detach() for p in self.params]  # the same storage, updated in place without autograd
        self.lr_views = [(-lr).view(-1, *[1] * (p.dim() - 1)) for p in self.values]  # float[run 1 ...]

    def step(self) -> None:
        torch._foreach_addcmul_(self.values, [p.grad for p in self.params], self.lr_views)  # theta += -lr_r * g

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


OPTIMIZERS = {Optimizer.adam: RunAdam, Optimizer.sgd: RunSGD}
"""The one dispatch table: optimizer -> its class, each made as cls(params, lr float[run], betas, eps)."""
