"""What each step of a supervised epoch reads of the responses it trains on, built once at the epoch's first step.

    live = m w                                 float[run batch trial pos]   (`lab.core.sft.token_weights`)
    nll  = -sum m w l / max(1, sum m w)                                     (`sft_loss`)
    demo_logps = sum_i w_i sum_q l_iq / sum_i w_i                           (`mean_log_prob`)
    hits = sum_{b,q} C[b, q, argmax_v log p_q(v)],   C[b, q, v] = sum_i m w [y_iq = v]   (the factorised policy)

The trained responses and their weights change only between epochs (expert iteration's kept samples; SFT's
demonstrations never), so their token weights, sums and per-position token counts are built once an epoch and a
step computes only what depends on its log-probs. A speed path: every value is bitwise lab.core.sft's plain
`sft_loss`, `mean_log_prob` and `token_accuracy` (tests/training/test_supervised.py). What it buys, by instruction
count (valgrind's cachegrind, a 500-run sweep at one thread, 30 minus 10 epochs so that start-up cancels): 12% of
the expert-iteration row (5.83 G -> 5.13 G instructions per 20 epochs; GRPO's row 5.14 G) and 8% of the SFT row
(5.61 G -> 5.17 G), most of it the token accuracy, whose per-position counts take a gather of 4,500 entries a
step at 500 runs where comparing every token of every response took 45,000 (about a tenth of a step).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from lab.core.sft import (
    TOKEN_AXES,
    accuracy_of,
    position_counts,
    position_hits,
    token_hits,
    token_weights,
    weighted_mean_log_prob,
    weighted_nll,
)


class EpochTokens(NamedTuple):
    """An epoch's token weights, their sums and (the factorised policy) per-position token counts: `of` at its first
    step, then `nll`, `mean_log_prob` and `position_hits` or `hits` at every step, `accuracy` at its end."""

    live: Tensor
    """m w, float[run batch trial pos] in the log-probs' dtype and layout (`token_weights`)"""
    counted: Tensor
    """sum m w, float[run]: the tokens that count"""
    divisor: Tensor
    """max(1, counted), float[run]: the NLL's"""
    count: Tensor
    """w, float[run batch trial] (1 where every response counts)"""
    responses: Tensor
    """sum w, float[run]: the mean sequence log-prob's divisor (0 where nothing is kept: NaN)"""
    positions: Tensor | None
    """each token's counted weight at each position, float[run batch pos vocab] (`position_counts`), where a
    step's argmax tokens are its per-position log-softmaxes' (the factorised policy); else None"""

    @classmethod
    def of(cls, log_probs: Tensor, mask: Tensor | None, weights: Tensor | None, responses: Tensor,
           log_softmax: Tensor | None = None) -> EpochTokens:
        """`log_softmax`: the step's float[run batch pos vocab] where each position's argmax does not depend on the
        response (the factorised policy), else None."""
        live = token_weights(log_probs, mask, weights)
        counted = live.sum(dim=TOKEN_AXES)
        count = torch.ones_like(log_probs[..., 0]) if weights is None else weights
        positions = None if log_softmax is None else position_counts(responses, live.float(), log_softmax.shape[-1])
        return cls(live, counted, counted.clamp_min(1), count, count.sum(dim=(-2, -1)), positions)

    def nll(self, log_probs: Tensor) -> Tensor:
        """`sft_loss`, float[run]."""
        return weighted_nll(log_probs, self.live, self.divisor)

    def mean_log_prob(self, log_probs: Tensor) -> Tensor:
        """`mean_log_prob`, float[run]."""
        return weighted_mean_log_prob(log_probs, self.count, self.responses)

    def hits(self, predicted: Tensor, responses: Tensor) -> Tensor:
        """The counted tokens where predicted is the response's, float[run]; `token_accuracy` is `accuracy`."""
        return token_hits(predicted, responses, self.live.float())

    def position_hits(self, log_softmax: Tensor) -> Tensor:
        """`hits` of the argmax tokens of per-position log-softmaxes float[run batch pos vocab], from `positions`."""
        return position_hits(self.positions, log_softmax)

    def accuracy(self, hits: Tensor) -> Tensor:
        """hits / counted, float[... run] (NaN where nothing counts)."""
        return accuracy_of(hits, self.counted)
