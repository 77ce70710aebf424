"""Divergence: a run whose loss or parameters stop being finite is stopped, frozen and reported.

    run r diverges at step s  <=>  loss_r(s) is inf or NaN,  or  a parameter of r is after step s
    then: run r's parameters go back to the last values known finite (its epoch's start) and stay
          there; its records after step s are NaN (its greedy evaluation and distance to pi* of that
          epoch too, both taken after the epoch's steps); the
          other runs of the batch carry on untouched (nothing couples runs)

The check is cheap on purpose: the loop keeps each step's per-run loss (computed anyway) and
looks at them once per epoch, together with the policy's logits at the epoch's end (computed
anyway for the next epoch's sampling); a non-finite parameter makes its logits non-finite. So a
healthy run pays one small reduction and one device sync per epoch, never per step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import Tensor

DIVERGED_EXIT_CODE = 3
"""`lab run`'s exit code when the run diverged (its records up to that step are written)."""


@dataclass(frozen=True)
class Divergence:
    """Where and how one run diverged: `step` counts optimizer steps from 0 over the whole run."""

    epoch: int
    step: int
    inner_step: int
    what: str
    """e.g. 'loss is nan', 'parameters encode, decode are not finite'"""

    def to_dict(self) -> dict:
        return asdict(self)

    def message(self, config) -> str:
        """One line for the user, with what to try: the setting at fault where one is far past what training
        survives (`EXTREME`: a huge --kl, --entropy-coef or --critic-lr, a tiny --temperature), a smaller
        --init-scale when the run diverged in its first epoch from an initialisation past `LARGE_INIT_SCALE`
        (no learning rate saves that), else a smaller --lr or fewer --steps."""
        where = f"the run diverged at epoch {self.epoch}, step {self.step} (inner step {self.inner_step}): {self.what}"
        for name, (option, past, advice) in EXTREME.items():
            value = getattr(config, name, None)
            if value is not None and past(value):
                return f"{where}; {option} {value:g} is the likely cause: try a {advice} {option}"
        init_scale = config.init_scale
        if self.epoch == 0 and init_scale > LARGE_INIT_SCALE:
            return f"{where}; try a smaller --init-scale (now {init_scale:g}; 1 is the lecture's)"
        return f"{where}; try a smaller --lr (now {config.lr:g}) or fewer --steps (now {config.steps})"


LARGE_INIT_SCALE = 10.0
"""An init scale above this makes logits of order scale^2 * dim: a first-epoch divergence is its doing."""

EXTREME = {
    "kl": ("--kl", lambda v: v > 1e3, "smaller"),
    "entropy_coef": ("--entropy-coef", lambda v: v > 1e3, "smaller"),
    "critic_lr": ("--critic-lr", lambda v: v > 1.0, "smaller"),
    "temperature": ("--temperature", lambda v: v < 1e-30, "larger"),
}
"""Settings that a divergence is put down to before the learning rate. A weight over 1000 times the largest
reward (2n - 1 for a prompt of n tokens) makes its term nearly the whole loss (past 3.4e38 it is inf in the
loop's float32 outright); a critic learning rate over 1 lets Adam move a value estimate by more than 1 a step;
below T = 1e-30 logits / T pass float32's largest value (3.4e38) for any logit above 3.4e8 T."""


class DivergenceGuard:
    """Watches R runs trained together; freezes each run at its first non-finite loss or parameter.

        guard.start_epoch(parameters)                     snapshot (the last values known finite)
        losses.append(loss.detach())                      every step, the loss float[run] already computed
        guard.after_step(parameters)                      every step: keeps frozen runs frozen (no-op if none)
        if guard.check(epoch, losses, logits, parameters):  at the epoch's end; True when a run just diverged
            logits = policy(prompts)                      (recompute: the diverged runs were restored)
    """

    def __init__(self, runs: int, steps: int, names: list[str]) -> None:
        self.runs, self.steps, self.names = runs, steps, names
        self.found: list[Divergence | None] = [None] * runs
        self.dead: Tensor | None = None  # int[dead runs], or None while every run is healthy
        self.frozen: list[Tensor] = []  # the dead runs' parameters, float[dead ...] each

    @property
    def all_diverged(self) -> bool:
        return all(d is not None for d in self.found)

    def start_epoch(self, parameters: list[Tensor]) -> None:
        self.snapshot = [p.detach().clone() for p in parameters]

    def after_step(self, parameters: list[Tensor]) -> None:
        if self.dead is not None:
            for p, frozen in zip(parameters, self.frozen):
                p.detach().index_copy_(0, self.dead, frozen)

    def check(self, epoch: int, losses: list[Tensor], logits: Tensor | None, parameters: list[Tensor]) -> bool:
        """Record every run that diverged during `epoch`; freeze it; True when there is a new one.

        `logits` float[run ...] of the policy after the epoch (computed anyway by the caller), or None
        to look at the parameters themselves."""
        loss = torch.stack(losses)  # float[step run]
        finite = (logits.isfinite().flatten(1).all(1) if logits is not None else
                  torch.stack([p.detach().isfinite().flatten(1).all(1) for p in parameters]).all(0))
        healthy = loss.isfinite().all(0) & finite  # bool[run]
        if bool(healthy.all()):
            return False
        new = [r for r in torch.nonzero(~healthy).flatten().tolist() if self.found[r] is None]
        if not new:
            return False
        for r in new:
            bad_steps = torch.nonzero(~loss[:, r].isfinite()).flatten().tolist()
            if bad_steps:
                inner = bad_steps[0]
                what = f"loss is {float(loss[inner, r])}"
            else:
                inner = self.steps - 1
                names = [n for n, p in zip(self.names, parameters) if not bool(p[r].isfinite().all())]
                what = f"parameters {', '.join(names) or '(logits)'} are not finite after the step"
            self.found[r] = Divergence(epoch, epoch * self.steps + inner, inner, what)
        dead = [r for r, d in enumerate(self.found) if d is not None]
        self.dead = torch.tensor(dead, device=loss.device)
        # a run that died before keeps its frozen values; a new one goes back to this epoch's start
        self.frozen = [snap.index_select(0, self.dead) for snap in self.snapshot]
        self.after_step(parameters)
        return True

    def mask(self, step_metrics: dict[str, np.ndarray], epoch_metrics: dict[str, np.ndarray],
             after_steps: tuple[str, ...]) -> None:
        """NaN every record of a diverged run after its divergence (in place): nothing after it is real.

        Its epoch's sample metrics stay (sampled before the divergence); that epoch's measurements taken
        after the epoch's steps (`after_steps`: the greedy evaluation, the distance to pi*) do not.
        """
        for r, d in enumerate(self.found):
            if d is None:
                continue
            for values in step_metrics.values():
                values[r, d.step + 1:] = np.nan
            for name, values in epoch_metrics.items():
                values[r, d.epoch + (name not in after_steps):] = np.nan

    def finish(self, step_metrics: dict[str, np.ndarray], epoch_metrics: dict[str, np.ndarray],
               after_steps: tuple[str, ...]) -> dict[str, np.ndarray]:
        """`mask`, then, when every run diverged, the step records cut after the last run's divergence
        (nothing was trained after it); returns the step records to keep."""
        self.mask(step_metrics, epoch_metrics, after_steps)
        if not self.all_diverged:
            return step_metrics
        last = max(d.step for d in self.found) + 1
        return {name: values[:, :last] for name, values in step_metrics.items()}
