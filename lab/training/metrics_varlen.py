"""Step metrics of variable-length training over live tokens, in bulk per block of epochs.

With the live-token mask m (EOS included, padding 0), per-token log-probs l, l_old, l_ref (0 on
padding) and rho = exp(l - l_old):

    kl           = sum_{b,t,q} k3(l, l_ref) / (batch trial)       (k3(0, 0) = 0 on padding)
    ratio_mean   = sum m rho / sum m;   ratio_max = max over live tokens of rho
    clip fractions and entropy: means over live tokens (entropy of each live position's
                                next-token distribution given the sampled prefix)
    loss, pg_loss, kl_exact: the values the step recorded (the minimised loss itself)

As `lab.training.metrics.StepMetricBlock` for the factorised loop: the loop hands over each step's tensors
without reading them, and a block of epochs is reduced at once (a few large kernels, no host sync).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lab.core.kl import k3

TOKEN_AXES = (-3, -2, -1)


def varlen_step_metrics(log_probs: Tensor, entropy: Tensor, old: Tensor, ref: Tensor, mask: Tensor,
                        deltas: Tensor, clip_eps: Tensor) -> dict[str, Tensor]:
    """Token metrics float[step epoch run] from log_probs and each position's entropy float[step epoch
    run batch trial pos] (`lab.policies.ar_fused.ar_log_probs`), and the epochs' old, ref float[epoch run
    batch trial pos], mask bool[epoch run batch trial pos], deltas float[epoch run batch trial]."""
    live = mask.to(log_probs.dtype)
    tokens = live.sum(dim=TOKEN_AXES)
    rho = (log_probs - old).exp() * live  # padding: exp(0 - 0) = 1, counted as 0
    eps = clip_eps.reshape(-1, 1, 1, 1)
    side = deltas.unsqueeze(-1)
    low = ((rho < 1 - eps) & (side < 0) & mask).sum(dim=TOKEN_AXES) / tokens
    high = ((rho > 1 + eps) & (side > 0) & mask).sum(dim=TOKEN_AXES) / tokens
    entropy = entropy * live
    batch, trial = log_probs.shape[-3:-1]
    return dict(kl=k3(log_probs, ref).sum(dim=TOKEN_AXES) / (batch * trial),
                ratio_mean=rho.sum(dim=TOKEN_AXES) / tokens, ratio_max=rho.amax(dim=TOKEN_AXES),
                clip_fraction=low + high, clip_low_fraction=low, clip_high_fraction=high,
                entropy=entropy.sum(dim=TOKEN_AXES) / tokens)


class VarlenMetricBlock:
    """Collects a block of epochs' per-step tensors, then computes their metrics in one go.

        block.add_step(step, log_probs, entropy, recorded)      recorded: name -> float[run]
        block.end_epoch(old, ref, mask, deltas)
        if block.full or last epoch:  values = block.flush(clip_eps)   # float[(epoch step) run] each
    """

    def __init__(self, steps: int, epochs: int) -> None:
        self.steps, self.epochs = steps, epochs
        self._clear()

    def _clear(self) -> None:
        self.per_step: list[list[dict[str, Tensor]]] = [[] for _ in range(self.steps)]
        self.per_epoch: list[tuple[Tensor, ...]] = []

    def add_step(self, step: int, log_probs: Tensor, entropy: Tensor, recorded: dict[str, Tensor]) -> None:
        self.per_step[step].append(dict(recorded, log_probs=log_probs.detach(), entropy=entropy))

    def end_epoch(self, old: Tensor, ref: Tensor, mask: Tensor, deltas: Tensor) -> None:
        self.per_epoch.append((old, ref, mask, deltas))

    @property
    def full(self) -> bool:
        return len(self.per_epoch) == self.epochs

    @torch.no_grad()
    def flush(self, clip_eps: Tensor) -> dict[str, Tensor]:
        """The collected epochs' step metrics, float[(epoch step) run] each; then start a new block."""
        epochs = len(self.per_epoch)

        def by_step(name: str) -> Tensor:  # float[step epoch ...]
            return torch.stack([d[name] for ds in self.per_step for d in ds]).unflatten(0, (self.steps, epochs))

        old, ref, mask, deltas = (torch.stack(t) for t in zip(*self.per_epoch))
        values = varlen_step_metrics(by_step("log_probs"), by_step("entropy"), old, ref, mask, deltas, clip_eps)
        values.update({name: by_step(name) for name in self.per_step[0][0] if name not in ("log_probs", "entropy")})
        self._clear()
        return {name: value.transpose(0, 1).flatten(0, 1) for name, value in values.items()}
