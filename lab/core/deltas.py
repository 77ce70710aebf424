"""Deltas: the per-response update signal made from a group's rewards.

For one prompt's group of G rewards r_1..r_G (axis `trial`):

    raw         delta_i = r_i
    centered    delta_i = r_i - mean(r)
    normalized  delta_i = (r_i - mean(r)) / (std(r) + std_eps)
    max         delta_i = r_i if r_i == max(r) else 0        (every tied maximum is kept)
    loo         delta_i = r_i - mean_{j != i} r_j            (leave-one-out baseline)
    batch       delta_i = (r_i - mean(r)) / (std(R) + std_eps), R every reward of the batch (all prompts'
                groups): the group's mean, the batch's std (TRL's scale_rewards="batch", PPO-Lite, arXiv 2508.08221)
    gae         delta_i = r_i, the return, from which the training loop's learned critic makes one
                advantage per token (GAE, `lab.core.gae`, `lab.training.critic`): no group needed

Each mode is a function here named by its entry in the `DeltaMode` table (`lab.core.modes`), which also says whether
it needs a group and a critic.

Conventions (docs/conventions.md lists how implementations differ):
- `std` is Bessel-corrected (divides by G - 1) by default, as in the lecture and
  `torch.std`; pass `unbiased=False` for the population std of the GRPO chapter.
- `std_eps` defaults to the lecture's 1e-5 (TRL uses 1e-4, verl 1e-6).
- A group whose rewards are all equal carries no signal: every baseline mode
  gives exact zeros there (set explicitly, since the float mean of equal values
  can differ from them by rounding), never NaN.
- A group of one has no baseline: the modes whose entry `needs_group` (`centered`, `normalized`, `loo`) refuse it.
- `gae` is not a function of the rewards alone: its advantages need a critic. Its deltas are the
  returns; exact analyses of the group modes (`lab.exact.estimators`) take `REWARD_MODES` and refuse it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lab.core.choices import parse_choice
from lab.core.modes import DeltaMode


def raw(rewards: Tensor, std_eps: float, unbiased: bool) -> Tensor:
    return rewards


def centered(rewards: Tensor, std_eps: float, unbiased: bool) -> Tensor:
    return rewards - rewards.mean(dim=-1, keepdim=True)


def normalized(rewards: Tensor, std_eps: float, unbiased: bool) -> Tensor:
    std = rewards.std(dim=-1, keepdim=True, correction=1 if unbiased else 0)
    return centered(rewards, std_eps, unbiased) / (std + std_eps)


def batch_normalized(rewards: Tensor, std_eps: float, unbiased: bool) -> Tensor:
    # one std over the last two axes (batch trial): the spread of the whole batch, not of each group
    std = rewards.std(dim=(-2, -1), keepdim=True, correction=1 if unbiased else 0)
    return centered(rewards, std_eps, unbiased) / (std + std_eps)


def group_max(rewards: Tensor, std_eps: float, unbiased: bool) -> Tensor:
    best = rewards.amax(dim=-1, keepdim=True)
    return torch.where(rewards == best, rewards, torch.zeros_like(rewards))


def leave_one_out(rewards: Tensor, std_eps: float, unbiased: bool) -> Tensor:
    group_size = rewards.shape[-1]
    others_mean = (rewards.sum(dim=-1, keepdim=True) - rewards) / (group_size - 1)
    return rewards - others_mean


def unit_scale(group_size: int) -> float:
    """s = 1: raw and leave-one-out deltas' expected update is grad J itself (claims 1 and 3)."""
    return 1.0


def centered_scale(group_size: int) -> float:
    """s = (G-1)/G: the group mean includes the sample itself (claim 4)."""
    return (group_size - 1) / group_size


REWARD_MODES = tuple(m for m in DeltaMode if not m.entry.needs_critic and not m.entry.needs_batch)
"""The modes that are functions of a group's rewards (what the exact estimator moments cover): not `gae` (a critic's)
nor `batch` (its std reads every other prompt's group too)."""


def parse_mode(mode: DeltaMode | str) -> DeltaMode:
    """An enum member from a member or its name, with an error that lists the choices."""
    return parse_choice(DeltaMode, mode, "delta mode")


def compute_deltas(
    rewards: Tensor,
    mode: DeltaMode | str,
    std_eps: float = 1e-5,
    unbiased: bool = True,
) -> Tensor:
    """Rewards float[batch trial] (any leading axes allowed) -> deltas of the same shape (`batch` reads the std over
    the last two axes, so its rewards are float[... batch trial]).

    `mode` is a `DeltaMode` or its name. `std_eps` and `unbiased` apply to
    `normalized` only; see the module docstring for the conventions.
    """
    mode = parse_mode(mode)
    if mode.entry.needs_group and rewards.shape[-1] < 2:
        raise ValueError(f"delta mode {mode.value!r} needs a group of at least 2 responses per prompt, "
                         f"got group size {rewards.shape[-1]}; use raw or max for G = 1")
    if not rewards.is_floating_point():
        rewards = rewards.float()
    deltas = mode.entry.formula(rewards, std_eps, unbiased)  # the mode's entry in the DeltaMode table
    if mode.entry.needs_group:
        constant = rewards.amax(dim=-1, keepdim=True) == rewards.amin(dim=-1, keepdim=True)
        deltas = deltas.masked_fill(constant, 0.0)
    return deltas
