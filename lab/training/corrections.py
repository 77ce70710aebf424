"""What multiplies each token's surrogate loss in a batch with a stale or mismatched sampler or an off-policy mask
(issue 38): gate = w x keep, float[run batch trial pos or 1], handed to `lab.core.losses.compute_loss`.

    w     the importance weights pi_old / mu of the runs with `importance_sampling_correction` (1 for the others);
          pi_old is the trainer's policy at the epoch's start (the first step's log-probs), mu the sampler
    keep  the off-policy sequence mask of the runs with `off_policy_mask_threshold` (1 for the others): its KL
          compares mu with pi_theta at this step, mu = pi_old when the sampler is the policy (TRL's default)

Both from lab.core.importance; the KL penalty and the entropy bonus are not weighed (as TRL's). `log`: the step
metrics importance_weight_mean (mean weight over live tokens) and off_policy_kept_fraction, one float[step run]
per epoch (1 for the runs without them).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lab.core.importance import importance_weights, off_policy_mask
from lab.training.config import TrainConfig

CORRECTION_STEP_LOG = ("importance_weight_mean", "off_policy_kept_fraction")


class Corrections:
    def __init__(self, configs: list[TrainConfig], device: torch.device) -> None:
        self.modes = [(c.importance_sampling_correction, c.importance_sampling_clip_min,
                       c.importance_sampling_clip_max) for c in configs]
        self.thresholds = torch.tensor([math.inf if c.off_policy_mask_threshold is None else
                                        c.off_policy_mask_threshold for c in configs], dtype=torch.float64,
                                       device=device)
        self.masking = any(c.off_policy_mask_threshold is not None for c in configs)
        self.log: dict[str, list[Tensor]] = {name: [] for name in CORRECTION_STEP_LOG}
        self.steps: list[tuple[Tensor, Tensor]] = []

    @classmethod
    def of(cls, configs: list[TrainConfig], device: torch.device) -> Corrections | None:
        used = any(c.importance_sampling_correction is not None or c.off_policy_mask_threshold is not None
                   for c in configs)
        return cls(configs, device) if used else None

    def gate(self, groups, log_probs: Tensor, old_log_probs: Tensor) -> Tensor:
        """w x keep for the step, float[run batch trial pos] (log_probs: this step's, old: the epoch's first)."""
        mask = groups.mask
        # no sampler log-probs: every run of the batch samples from the policy it trains (no lag, no mismatch)
        sampling = old_log_probs if groups.sampling_log_probs is None else groups.sampling_log_probs
        weights = torch.ones_like(log_probs, dtype=torch.float64)
        for r, (mode, low, high) in enumerate(self.modes):
            if mode is not None:
                weights[r] = importance_weights(old_log_probs[r].double(), sampling[r].double(),
                                                mode, low, high, None if mask is None else mask[r])
        keep = torch.ones_like(weights[..., :1])
        if self.masking:
            keep = off_policy_mask(groups.deltas.double(), log_probs.double(), sampling.double(),
                                   self.thresholds.view(-1, 1, 1, 1), mask)
        live = torch.ones_like(weights, dtype=torch.bool) if mask is None else mask
        self.steps.append(((weights * live).sum(dim=(1, 2, 3)) / live.sum(dim=(1, 2, 3)), keep.mean(dim=(1, 2, 3))))
        return (weights * keep).to(log_probs.dtype)

    def end_epoch(self) -> None:
        if self.steps:
            weight, kept = (torch.stack(v).float() for v in zip(*self.steps))  # float[step run]
            self.log["importance_weight_mean"].append(weight)
            self.log["off_policy_kept_fraction"].append(kept)
        self.steps = []
