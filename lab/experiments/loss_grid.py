"""A sweep's loss-specific settings: each on the grid points of the losses that read it.

    LOSS_ONLY  the fields marked `loss_only` (`lab.training.config`): read by the losses whose entry names them
               (`lab.core.modes.Loss.settings`: epsilon_high, clip_delta, importance_sampling_level, ...)
    PG_ONLY    the fields of the policy-gradient losses only (top_entropy_quantile)

A point of another loss keeps their defaults (`drop_unread`), so one sweep compares `--loss clipped --loss cispo
--epsilon-high 0.28 --epsilon-high 5`; a value no loss of the grid reads is one line (`check_loss_fields`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from lab.core.choices import ConfigError
from lab.core.modes import Method, TrainingLoss
from lab.training.config import TrainConfig

LOSS_ONLY = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.metadata["loss_only"])
PG_ONLY = ("top_entropy_quantile",)


def plain(value):
    return getattr(value, "value", value)


def loss_of(value) -> TrainingLoss | None:
    """The loss a grid value names (None for a wrong name: the config reports it)."""
    return TrainingLoss(plain(value)) if plain(value) in {m.value for m in TrainingLoss} else None


def check_loss_fields(base: TrainConfig, grid: dict[str, Sequence]) -> None:
    """A loss's own setting given apart from its default where no loss of the grid reads it: one line."""
    losses = [loss for loss in map(loss_of, grid.get("loss", [base.loss])) if loss is not None]
    default = TrainConfig()
    for name in LOSS_ONLY:
        given = [v for v in grid.get(name, []) if plain(v) != plain(getattr(default, name))]
        if given and not any(name in loss.entry.settings for loss in losses):
            readers = [m.value for m in TrainingLoss if name in m.entry.settings]
            raise ConfigError(f"--{name.replace('_', '-')} applies to --loss {' or '.join(readers)} only; drop it or "
                              "add one of those")


def drop_unread(settings: dict, base: TrainConfig) -> None:
    """Remove from a grid point's `settings` the loss-specific ones its loss does not read."""
    loss = loss_of(settings.get("loss", base.loss))
    if loss is None:
        return
    for name in LOSS_ONLY:
        if name in settings and name not in loss.entry.settings:
            settings.pop(name)
    if loss.entry.method is not Method.policy_gradient:
        for name in PG_ONLY:
            settings.pop(name, None)
