"""Adam with a learning rate per run.

    m <- b1 m + (1 - b1) g            v <- b2 v + (1 - b2) g^2
    theta <- theta - lr_r / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

The same arithmetic, in the same order, as `torch.optim.Adam` (no weight decay,
no amsgrad), but `lr` is float[run] broadcast over each parameter's leading run
axis, so a sweep over learning rates is still one batched update. Adam is
elementwise, so runs never couple.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


class RunAdam:
    def __init__(self, params: list[Tensor], lr: Tensor, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = list(params)
        self.lr = lr  # float[run]
        self.betas, self.eps = betas, eps
        self.t = 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        bias1, bias2_sqrt = 1 - b1 ** self.t, math.sqrt(1 - b2 ** self.t)
        grads = [p.grad for p in self.params]
        # torch's multi-tensor (_foreach) kernels, as torch.optim.Adam's foreach path uses:
        # one call per operation for all parameters instead of one per parameter
        torch._foreach_lerp_(self.m, grads, 1 - b1)
        torch._foreach_mul_(self.v, b2)
        torch._foreach_addcmul_(self.v, grads, grads, value=1 - b2)
        denoms = torch._foreach_sqrt(self.v)
        torch._foreach_div_(denoms, bias2_sqrt)
        torch._foreach_add_(denoms, self.eps)
        step_size = self.lr / bias1  # float[run]
        steps = [step_size.view(-1, *[1] * (p.dim() - 1)) * m for p, m in zip(self.params, self.m)]
        torch._foreach_addcdiv_(self.params, steps, denoms, value=-1.0)  # theta -= step * m / denom

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None
