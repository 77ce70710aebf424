"""Response lengths of the epoch's samples, split by correctness (the length-bias metrics).

    response_length   = mean over the epoch's samples of |o|
    correct_length    = mean of |o| over the samples that are exactly correct   (NaN when there are none)
    incorrect_length  = mean of |o| over the other samples                       (NaN when there are none)

|o| counts live tokens, EOS included (`lab.policies.response_lengths`); a factorised response always
has the prompt's length. "Correct" is the task's target exactly: sorted(prompt), followed by EOS
for the autoregressive policy.
"""

from __future__ import annotations

from torch import Tensor

LENGTH_METRICS = {
    "response_length": "mean length of the epoch's sampled responses in tokens, EOS included",
    "correct_length": "mean length of the sampled responses that are exactly the target (empty when none is)",
    "incorrect_length": "mean length of the other sampled responses (empty when every response is correct)",
}

EMPTY_WHEN_NONE = frozenset({"correct_length", "incorrect_length"})
"""Length metrics that are NaN (an empty CSV cell) in an epoch without such samples."""


def length_metrics(lengths: Tensor, correct: Tensor) -> dict[str, Tensor]:
    """lengths float[run epoch batch trial], correct bool[run epoch batch trial] -> float[run epoch] each."""
    lengths = lengths.float()
    right, wrong = correct.float(), (~correct).float()
    # 0 / 0 is NaN: an epoch without a correct (or without a wrong) sample has no such mean
    return dict(response_length=lengths.mean(dim=(-2, -1)),
                correct_length=(lengths * right).sum(dim=(-2, -1)) / right.sum(dim=(-2, -1)),
                incorrect_length=(lengths * wrong).sum(dim=(-2, -1)) / wrong.sum(dim=(-2, -1)))
