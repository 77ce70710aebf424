"""A reference that follows the policy (TR-DPO, Gorbatovski et al., arXiv:2404.09656; TRL's `sync_ref_model`):
every tau optimizer steps the reference's parameters move toward the policy's,

    phi_ref <- alpha phi_theta + (1 - alpha) phi_ref          (in parameters, not in probabilities)

alpha = `ref_model_mixup_alpha` (TRL default 0.6), tau = `ref_model_sync_steps` (TRL default 512), counted in
optimizer steps from 1 as TRL's `state.global_step` after each step (`SyncRefModelCallback.on_step_end`).
alpha = 1 is the periodic hard refresh (the lab's `--kl-period`, counted in epochs); a frozen reference never mixes.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor


def sync_due(step: int, sync_steps: int) -> bool:
    """After the `step`-th optimizer step (1-based), the reference mixes iff step is a multiple of tau."""
    return step % sync_steps == 0


def mix_reference(reference: Sequence[Tensor], parameters: Sequence[Tensor], alpha: float | Tensor
                  ) -> list[Tensor]:
    """alpha phi_theta + (1 - alpha) phi_ref for each parameter (new tensors, no gradient); `alpha` a float or
    float[run], one per run along each parameter's leading axis."""
    mixed = []
    for ref, theta in zip(reference, parameters, strict=True):
        a = alpha.reshape(-1, *(1,) * (theta.dim() - 1)).to(theta) if isinstance(alpha, Tensor) else alpha
        mixed.append((ref.detach() * (1 - a) + theta.detach() * a))
    return mixed
