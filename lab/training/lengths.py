"""Response lengths of the epoch's samples, split by correctness (the length-bias metrics).

    response_length   = mean over the epoch's samples of |o|
    correct_length    = mean of |o| over the samples that are exactly correct   (NaN when there are none)
    incorrect_length  = mean of |o| over the other samples                       (NaN when there are none)

|o| counts live tokens, EOS included (`lab.policies.response_lengths`); a factorised response always
has the prompt's length. "Correct" is the task's target exactly: sorted(prompt), followed by EOS
for the autoregressive policy (`eos_targets`), whose responses are capped at `resolve_max_length`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lab.training.config import TrainConfig

LENGTH_METRICS = {
    "response_length": "mean length of the epoch's sampled responses in tokens, EOS included",
    "correct_length": "mean length of the sampled responses that are exactly the target (empty when none is)",
    "incorrect_length": "mean length of the other sampled responses (empty when every response is correct)",
}

EMPTY_WHEN_NONE = frozenset({"correct_length", "incorrect_length"})
"""Length metrics that are NaN (an empty CSV cell) in an epoch without such samples."""


def response_lengths(responses: Tensor, mask: Tensor | None) -> Tensor:
    """|o| of every response int[... batch trial pos]: its live tokens, every position without a mask -> int[... batch trial]."""
    if mask is None:
        return torch.full(responses.shape[:-1], responses.shape[-1], device=responses.device)
    return mask.sum(dim=-1)


def length_metrics(lengths: Tensor, correct: Tensor) -> dict[str, Tensor]:
    """lengths float[run epoch batch trial], correct bool[run epoch batch trial] -> float[run epoch] each."""
    lengths = lengths.float()
    right, wrong = correct.float(), (~correct).float()
    # 0 / 0 is NaN: an epoch without a correct (or without a wrong) sample has no such mean
    return dict(response_length=lengths.mean(dim=(-2, -1)),
                correct_length=(lengths * right).sum(dim=(-2, -1)) / right.sum(dim=(-2, -1)),
                incorrect_length=(lengths * wrong).sum(dim=(-2, -1)) / wrong.sum(dim=(-2, -1)))


LENGTH_MARGIN = 2
"""max_length = None means prompt length + LENGTH_MARGIN: room for sorted(x), EOS and one extra token."""


def resolve_max_length(config: TrainConfig, prompt_length: int) -> int:
    """The response cap of an autoregressive run; a ValueError when sorted(prompt) + EOS cannot fit."""
    cap = prompt_length + LENGTH_MARGIN if config.max_length is None else config.max_length
    if cap < prompt_length + 1:
        raise ValueError(f"max_length {cap} cannot hold the sorted prompt ({prompt_length} tokens) and EOS; "
                         f"use --max-length {prompt_length + 1} or more")
    return cap


def eos_targets(targets: Tensor, eos: int, max_length: int) -> Tensor:
    """sorted(prompt) followed by EOS padding: int[batch n] -> int[batch max_length]."""
    return torch.cat([targets, targets.new_full((targets.shape[0], max_length - targets.shape[1]), eos)], dim=-1)
