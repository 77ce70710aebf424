"""What differs between the runs of one batched computation: their numbers, and their modes as groups.

    loss = sum_r loss_r,   loss_r = surrogate_{mode_r}(l_r, d_r) + beta_r * KL_{agg_r, k_r}(l_r, l_ref_r)
    (a `--kl-in reward` run: d_r = deltas(r - beta_r * sum_pos k_r(l_r, l_ref_r)), and no KL in its loss)

Every run keeps its own settings inside a batch: numbers become float[run] tensors, and each mode
(reward, delta, loss, aggregation) is applied to the runs that chose it (`RunGroups`). The
training loop (`lab.training.train`) takes them from `RunSettings`, and hands its tensors over as
`Records` through `records_of`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from lab.core.modes import LEVEL, KLPlacement
from lab.training.records import EPOCH_METRICS, GREEDY_METRICS, TRACKED_EPOCH_METRICS, Records
from lab.training.config import TrainConfig
from lab.training.corrections import Corrections
from lab.training.entropy_control import EntropyControl


class RunGroups:
    """Runs grouped by one per-run setting, to apply each setting's function to its runs only."""

    def __init__(self, keys: Sequence, device: torch.device) -> None:
        self.keys = list(keys)
        distinct = list(dict.fromkeys(self.keys))
        self.groups = [(k, torch.tensor([i for i, x in enumerate(self.keys) if x == k], device=device))
                       for k in distinct]
        order = torch.cat([idx for _, idx in self.groups])
        self.inverse = torch.argsort(order)

    def apply(self, fn: Callable[..., Tensor], *tensors: Tensor) -> Tensor:
        """fn(key, *tensors restricted to that key's runs) for each key, reassembled in run order (a None
        tensor, such as the mask of fixed-length responses, is passed on as None)."""
        if len(self.groups) == 1:  # the common case: no gather needed
            return fn(self.groups[0][0], *tensors)
        parts = [fn(key, *(None if t is None else t[idx] for t in tensors)) for key, idx in self.groups]
        return torch.cat(parts)[self.inverse]


class RunSettings(NamedTuple):
    """The per-run numbers and mode groups of a batch of runs (`RunSettings.of(configs, device)`)."""

    lr: Tensor
    """float[run]"""
    beta: Tensor
    """float[run], the KL weight"""
    loss_settings: dict[str, Tensor]
    """the settings the runs' losses read (their entries' `settings`: `clip_eps`, ...), float[run] each"""
    any_kl: bool
    """whether some run has the KL in its loss"""
    kl_runs: Tensor | None
    """the runs with beta > 0 and the KL in the loss (None: every run). Where beta = 0 the KL stays out of the
    loss even beside runs with beta > 0: 0 * an overflowing k3 would make that run's loss and gradient NaN"""
    kl_agg_groups: RunGroups | None
    """the KL runs grouped by (loss aggregation, estimator) (None without KL runs)"""
    reward_kl_runs: Tensor
    """int[runs with beta > 0 and `--kl-in reward`]: their deltas are made from r - beta * the summed estimator"""
    reward_kl_groups: RunGroups | None
    """those runs grouped by estimator (None without them)"""
    reward_groups: RunGroups
    delta_groups: RunGroups
    loss_groups: RunGroups
    """grouped by (loss mode, aggregation, importance_sampling_level)"""
    loss_kinds: RunGroups
    """grouped by (loss, importance_sampling_level) (whose clip metrics a run reports)"""
    entropy_coef: Tensor
    """float[run], c_H"""
    bonus_runs: Tensor
    """int[runs with c_H > 0 or adaptive entropy]: only they pay for the entropy bonus's differentiable forward pass"""
    top_entropy_quantile: Tensor | None = None
    """float[run], rho of the top-entropy gate (`lab.core.token_masks`); None: every run keeps every token"""
    truncation_runs: Tensor | None = None
    """bool[run]: the runs whose truncated responses leave the loss (None: no such run)"""
    corrections: object = None
    """`lab.training.corrections.Corrections`: importance weights and the off-policy mask (None without them)"""
    entropy_control: object = None
    """`lab.training.entropy_control.EntropyControl`: adaptive entropy coefficients (None without them)"""

    @classmethod
    def of(cls, configs: Sequence[TrainConfig], device: torch.device) -> RunSettings:
        def per_run(name: str) -> Tensor:
            return torch.tensor([getattr(c, name) for c in configs], device=device, dtype=configs[0].dtype.torch)

        kl_list = [r for r, c in enumerate(configs) if c.kl > 0 and c.kl_in is KLPlacement.loss]
        bonus_runs = torch.tensor([r for r, c in enumerate(configs) if c.entropy_coef > 0 or c.adaptive_entropy],
                                  device=device, dtype=torch.long)
        reward_list = [r for r, c in enumerate(configs) if c.kl > 0 and c.kl_in is KLPlacement.reward]
        return cls(
            lr=per_run("lr"), beta=per_run("kl"), any_kl=bool(kl_list),
            loss_settings={name: torch.tensor([c.loss_setting(name) for c in configs], device=device,
                                              dtype=configs[0].dtype.torch)
                           for name in dict.fromkeys(n for c in configs for n in c.loss.entry.settings if n != LEVEL)},
            kl_runs=None if len(kl_list) == len(configs) else torch.tensor(kl_list, device=device, dtype=torch.long),
            kl_agg_groups=RunGroups([(configs[r].loss_agg, configs[r].kl_estimator) for r in kl_list], device)
            if kl_list else None,
            reward_kl_runs=torch.tensor(reward_list, device=device, dtype=torch.long),
            reward_kl_groups=RunGroups([configs[r].kl_estimator for r in reward_list], device)
            if reward_list else None,
            reward_groups=RunGroups([c.reward for c in configs], device),
            delta_groups=RunGroups([c.delta for c in configs], device),
            loss_groups=RunGroups([(c.loss, c.loss_agg, c.importance_sampling_level.value) for c in configs], device),
            loss_kinds=RunGroups([(c.loss, c.importance_sampling_level.value) for c in configs], device),
            entropy_coef=per_run("entropy_coef"),
            bonus_runs=bonus_runs,
            top_entropy_quantile=per_run("top_entropy_quantile")
            if any(c.top_entropy_quantile < 1 for c in configs) else None,
            truncation_runs=torch.tensor([c.mask_truncated_completions for c in configs], device=device)
            if any(c.mask_truncated_completions for c in configs) else None,
            corrections=Corrections.of(configs, device),
            entropy_control=EntropyControl.of(configs, bonus_runs, device),
        )


def clip_metrics(settings: RunSettings, ratio: Tensor, side: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """Each run's clip fractions (low, high) by its loss's entry (`clip_metrics`; NaN where it has none: DPO, SFT),
    float[step epoch run] each: ratio float[step epoch run batch trial pos], side float[epoch run batch trial 1 or
    pos], mask bool[epoch run batch trial pos] or None (`lab.training.metrics.ClipMetrics`)."""
    def of(key, runs: Tensor | None) -> tuple[Tensor, Tensor]:
        def pick(t: Tensor | None, axis: int) -> Tensor | None:
            return t if runs is None or t is None else t.index_select(axis, runs)

        entry = key[0].entry
        if entry.clip_metrics is None:
            nan = ratio.new_full(pick(ratio, 2).shape[:3], math.nan)
            return nan, nan
        values = {name: key[1] if name == LEVEL else pick(settings.loss_settings[name], 0) for name in entry.settings}
        return entry.clip_metrics(pick(ratio, 2), pick(side, 1), pick(mask, 1), **values)

    groups = settings.loss_kinds.groups
    if len(groups) == 1:  # the common case: no gather
        return of(groups[0][0], None)
    low, high = ratio.new_full(ratio.shape[:3], math.nan), ratio.new_full(ratio.shape[:3], math.nan)
    for loss, runs in groups:
        low[:, :, runs], high[:, :, runs] = (t.to(low.dtype) for t in of(loss, runs))  # a mask's count: float32
    return low, high


def records_of(configs: list[TrainConfig], prompts: Tensor, optimum: Tensor, step_log: dict[str, list[Tensor]],
               epoch_log: dict[str, Tensor], guard, policy, critic_log: tuple[dict, dict] | None = None,
               **rest) -> Records:
    """The loop's ending: step metrics (blocks float[step run]) as float[run step], epoch metrics
    float[run epoch] (NaN where the loop has none), a diverged run's later records emptied
    (`lab.training.divergence.DivergenceGuard.finish`), the final parameters on the CPU, contiguous.
    `critic_log`: the critics' (step, epoch) metrics float[run time] (`lab.training.critic`), only where some
    run has one. `rest`: the other `Records` fields (samples, greedy_responses, seconds, eos, ...)."""
    epochs = next(iter(epoch_log.values())).shape[1]
    nan_epochs = torch.full((len(configs), epochs), float("nan"))
    step_values = {name: torch.cat(values).T.cpu().float().numpy() for name, values in step_log.items()}
    names = [*EPOCH_METRICS, *(name for name in TRACKED_EPOCH_METRICS if name in epoch_log)]
    epoch_values = {name: epoch_log.get(name, nan_epochs).cpu().float().numpy() for name in names}
    if critic_log is not None:
        step_values.update({name: value.cpu().numpy() for name, value in critic_log[0].items()})
        epoch_values.update({name: value.cpu().numpy() for name, value in critic_log[1].items()})
    return Records(
        configs=configs, prompts=prompts.cpu().numpy(), optimum=optimum.cpu().numpy(),
        step_metrics=guard.finish(step_values, epoch_values, (*GREEDY_METRICS, *TRACKED_EPOCH_METRICS)),
        epoch_metrics=epoch_values,
        state={name: p.detach().cpu().clone(memory_format=torch.contiguous_format)
               for name, p in policy.named_parameters()},
        divergence=guard.found, **rest)
