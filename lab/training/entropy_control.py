"""Adaptive entropy control inside the loop (TRL's `use_adaptive_entropy`; lab.core.adaptive_entropy): per run, the
coefficient a step applies and its update after the step, from the step's exact mean per-position entropy (for the
factorised policy, what TRL's mean entropy over sampled tokens estimates). Runs without it keep `entropy_coef`.
`log`: the step metric entropy_coef (the coefficient each step applied), one float[step run] per epoch."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lab.core.adaptive_entropy import applied_entropy_coef, next_entropy_coef
from lab.training.config import TrainConfig


class EntropyControl:
    def __init__(self, configs: list[TrainConfig], bonus_runs: Tensor, device: torch.device) -> None:
        chosen = [configs[r] for r in bonus_runs.tolist()]

        def of(name: str, default: float) -> Tensor:
            return torch.tensor([getattr(c, name) if c.adaptive_entropy else default for c in chosen],
                                dtype=torch.float64, device=device)

        self.adaptive = torch.tensor([c.adaptive_entropy for c in chosen], device=device)
        self.coef = torch.tensor([c.entropy_coef for c in chosen], dtype=torch.float64, device=device)
        self.last = torch.full_like(self.coef, math.inf)  # no entropy measured before the first step
        self.target, self.delta = of("entropy_target", math.inf), of("entropy_coef_delta", 0.0)
        self.low, self.high = of("entropy_coef_min", -math.inf), of("entropy_coef_max", math.inf)
        self.runs, self.count = bonus_runs, len(configs)
        self.measured: Tensor | None = None
        self.log: dict[str, list[Tensor]] = {"entropy_coef": []}
        self.steps: list[Tensor] = []

    @classmethod
    def of(cls, configs: list[TrainConfig], bonus_runs: Tensor, device: torch.device) -> EntropyControl | None:
        return cls(configs, bonus_runs, device) if any(c.adaptive_entropy for c in configs) else None

    def coefficients(self, bonus: Tensor) -> Tensor:
        """The coefficient each bonus run applies at this step, float[bonus-run]; keeps the step's entropy."""
        self.measured = bonus.detach().double()
        applied = torch.where(self.adaptive, applied_entropy_coef(self.coef, self.last, self.target), self.coef)
        full = torch.zeros(self.count, dtype=torch.float64, device=applied.device)
        self.steps.append(full.index_copy(0, self.runs, applied).float())
        return applied.to(bonus.dtype)

    def after_step(self, epoch=None) -> None:
        if self.measured is None:
            return
        moved = next_entropy_coef(self.coef, self.measured, self.target, self.delta, self.low, self.high)
        self.coef = torch.where(self.adaptive, moved, self.coef)
        self.last, self.measured = self.measured, None

    def end_epoch(self) -> None:
        if self.steps:
            self.log["entropy_coef"].append(torch.stack(self.steps))
        self.steps = []
