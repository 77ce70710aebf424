"""The reference that follows the policy inside the loop (TRL's `sync_ref_model`; lab.core.reference_mixing):
after each optimizer step t (counted from 1 over the whole run), the runs with `sync_ref_model` whose
`ref_model_sync_steps` divides t mix their reference toward their policy by `ref_model_mixup_alpha`; the other
runs' references are left exactly as they are. The epoch's reference log-probs are taken at its first step, as
TRL takes them when it generates, so a mix acts from the next epoch's groups on."""

from __future__ import annotations

import torch
from torch import Tensor

from lab.core.reference_mixing import mix_reference, sync_due
from lab.training.config import TrainConfig


class ReferenceSync:
    def __init__(self, configs: list[TrainConfig], parameters: list[Tensor], device: torch.device) -> None:
        self.parameters, self.step = parameters, 0
        self.every = [c.ref_model_sync_steps if c.sync_ref_model else None for c in configs]
        self.alpha = torch.tensor([c.ref_model_mixup_alpha or 0.0 for c in configs], dtype=torch.float64,
                                  device=device)

    @classmethod
    def of(cls, configs: list[TrainConfig], parameters: list[Tensor], device: torch.device) -> ReferenceSync | None:
        return cls(configs, parameters, device) if any(c.sync_ref_model for c in configs) else None

    def after_step(self, epoch) -> None:
        self.step += 1
        due = torch.tensor([n is not None and sync_due(self.step, n) for n in self.every],
                           device=self.alpha.device)
        if not due.any():
            return
        mixed = mix_reference(epoch.reference, self.parameters, self.alpha)
        epoch.reference[:] = [torch.where(due.view(-1, *[1] * (ref.dim() - 1)), new.to(ref.dtype), ref)
                              for ref, new in zip(epoch.reference, mixed)]
