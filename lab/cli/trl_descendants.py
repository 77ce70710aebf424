"""`lab trl`'s options of issue 37: TRL 1.16's descendant loss types and settings, checked without torch.

    --loss cispo|sapo|luspo|vespo   TRL's loss_type, each with its own aggregation (`lab.core.modes.TRL_AGGREGATION`)
    --epsilon-high, --clip-delta (TRL's delta), --importance-sampling-level, --top-entropy-quantile,
    --mask-truncated-completions, --sapo-temperature-*, --vespo-*    GRPOConfig fields of those names

`lab.bridge.trl_grpo.TRLGRPO` builds the GRPOConfig (docs/trl.md); here each value is checked, one line per mistake.
"""

from __future__ import annotations

import math


def _check(name: str, value, ok: bool, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{name} must be {allowed}, got {value}")


DESCENDANT_DEFAULTS = dict(epsilon_high=None, clip_delta=None, importance_sampling_level="token",
                           top_entropy_quantile=1.0, mask_truncated_completions=False, sapo_temperature_pos=None,
                           sapo_temperature_neg=None, vespo_k_pos=None, vespo_lambda_pos=None, vespo_k_neg=None,
                           vespo_lambda_neg=None)
"""Issue 37's settings at TRL's defaults: a run's settings list those it changes."""


def check_descendants(loss, given: dict) -> None:
    """Issue 37's settings in TRL's ranges, each for the loss types that read it (one line each)."""
    for name in ("epsilon_high", "sapo_temperature_pos", "sapo_temperature_neg", "vespo_lambda_pos",
                 "vespo_lambda_neg"):
        value = given[name]
        _check("--" + name.replace("_", "-"), value, value is None or (math.isfinite(value) and value > 0),
               "a finite number > 0")
    for name in ("vespo_k_pos", "vespo_k_neg"):
        value = given[name]
        _check("--" + name.replace("_", "-"), value, value is None or (math.isfinite(value) and value >= 0),
               "a finite number >= 0")
    _check("--clip-delta", given["clip_delta"], given["clip_delta"] is None or 1 < given["clip_delta"] < math.inf,
           "a finite number > 1")
    _check("--top-entropy-quantile", given["top_entropy_quantile"], 0 <= given["top_entropy_quantile"] <= 1,
           "a number in [0, 1]")
    readers = {"sapo_temperature": ("sapo",), "vespo": ("vespo",), "clip_delta": ("clipped", "luspo"),
               "epsilon_high": ("clipped", "luspo", "cispo")}
    for name, value in given.items():
        owners = next((v for k, v in readers.items() if name.startswith(k)), None)
        if owners and value is not None and loss.value not in owners:
            raise ValueError(f"--{name.replace('_', '-')} applies to --loss {' or '.join(owners)} only")
