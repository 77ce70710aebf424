"""The autoregressive node's output layer, forward and backward, in two memory layouts of the same arithmetic.

    logits  = z @ E^T                 log_softmax = logits - logsumexp(logits)     p = exp(log_softmax)
    log_probs = mask * log_softmax[y]    entropy = -sum_w p_w log_softmax_w
    dL/dlogits = g (onehot(y) - p)    dL/dE += dL/dlogits^T @ z    dL/dz = dL/dlogits @ E

`rows_forward` / `rows_backward` are the plain version: logits float[run rows vocab] (rows = batch trial pos), as
`lab.policies.ar_fused` first wrote them. `vocab_first_forward` / `vocab_first_backward` are a speed path: logits
float[run vocab rows], so every reduction over the few tokens (V + 1 = 6 in the lecture) runs along the long rows
axis instead of as 75,000 loops of 6 at 500 runs. Each element goes through the same operations: the products are
the same matrix products (MKL gives the transposed layout the same bits: tested), the maximum is exact, and the
sum inside logsumexp is taken in the order torch's own sum takes a last axis of at most `SHORT_SUM_MAX` elements
(`short_sum`, checked against torch at import: `VOCAB_FIRST_EXACT`). So log-probs, gradients and trajectories are
bitwise the plain version's (tests/policies/test_ar_softmax.py). The entropy, a metric only, is the one exception:
the plain version sums it as a matrix product with ones, whose order is MKL's; here it is `short_sum`'s, so the
entropy moves by float32 rounding (about 1e-7 relative: the `entropy` column of a run's metrics.csv is no longer
byte for byte the pinned one, within tests/test_pinned_outputs.py's tolerance; samples and every other column are).

Measured: 5% of the 500-run autoregressive `lab bench` row (see `vocab_first_forward`).
"""

from __future__ import annotations

import torch
from torch import Tensor

SHORT_SUM_MAX = 7
"""The longest last axis whose sum torch takes as `short_sum` does (longer axes are vectorised differently)."""


def short_sum(rows: list[Tensor]) -> Tensor:
    """sum_i rows[i] in the order torch sums a contiguous last axis of n <= `SHORT_SUM_MAX` elements: the first
    four start four accumulators, later ones add to the first, then ((a0 + a1) + a2) + a3; fewer than four add
    left to right."""
    if len(rows) < 4:
        total = rows[0]
        for row in rows[1:]:
            total = total + row
        return total
    first = rows[0]
    for row in rows[4:]:
        first = first + row
    return ((first + rows[1]) + rows[2]) + rows[3]


def _short_sum_is_torchs() -> bool:
    """True where `short_sum` gives torch's sum of a short last axis bit for bit (checked once, on fixed values)."""
    values = torch.linspace(-3.0, 3.0, 4096 * SHORT_SUM_MAX).sin().exp().view(4096, SHORT_SUM_MAX)
    return all(torch.equal(values[:, :n].sum(-1), short_sum(list(values[:, :n].unbind(-1))))
               for n in range(1, SHORT_SUM_MAX + 1))


VOCAB_FIRST_EXACT = _short_sum_is_torchs()
"""Whether this torch sums a short last axis in `short_sum`'s order; where it does not, the node keeps the plain
layout, so trajectories never depend on which layout ran."""


def vocab_first(tokens: int) -> bool:
    """Whether the node takes the vocab-first layout for this many tokens (EOS included): bitwise the plain one."""
    return VOCAB_FIRST_EXACT and tokens <= SHORT_SUM_MAX


def rows_forward(z: Tensor, embedding: Tensor, index: Tensor, mask: Tensor):
    """z float[run rows dim], embedding float[run vocab dim], index int[run rows 1] (each row's token), mask
    bool[... rows] -> log_probs, entropy (both mask's shape) and what the backward keeps (probs float[run rows
    vocab], index)."""
    logits = torch.bmm(z, embedding.mT)
    log_softmax = logits.sub_(torch.logsumexp(logits, dim=-1, keepdim=True))  # float[run rows vocab]
    picked = log_softmax.gather(-1, index).view(mask.shape)
    log_probs = torch.where(mask, picked, torch.zeros((), dtype=picked.dtype, device=picked.device))
    probs = log_softmax.exp()
    # the sum over the few tokens as a matmul (a reduction over a last axis of V + 1 runs as many short loops)
    ones = torch.ones(embedding.shape[1], 1, dtype=z.dtype, device=z.device)
    entropy = ((probs * log_softmax) @ ones).view(mask.shape).neg_()
    return log_probs, entropy, (probs, index)


def rows_backward(kept, g: Tensor, z: Tensor, embedding: Tensor) -> tuple[Tensor, Tensor]:
    """g float[run rows 1] (dL/dlog_probs, 0 on padding) -> (the output layer's dL/dE, dL/dz)."""
    probs, index = kept
    grad_logits = torch.zeros_like(probs).scatter_(-1, index, g).sub_(probs * g)
    return torch.bmm(grad_logits.mT, z), torch.bmm(grad_logits, embedding)


def vocab_first_forward(z: Tensor, embedding: Tensor, index: Tensor, mask: Tensor):
    """`rows_forward` with logits float[run vocab rows]; the same log_probs bit for bit (the entropy to float32
    rounding). Keeps probs float[run vocab rows] and index int[run 1 rows].

    Measured: a 500-run autoregressive sweep of 6 epochs at one thread took 2.06 s CPU with this layout against
    2.19 s with `rows_forward` (medians of 8 alternating pairs, median ratio 0.95, every pair below 1; an earlier
    round of 5 pairs gave 1.05, so over all 13 pairs the median ratio is 0.95: about 5% of the `lab bench` row;
    2-core VM at load 10 to 12, docs/speed.md). The fused node alone: 3.5% (fwd and bwd, 6 pairs)."""
    logits = torch.bmm(embedding, z.mT)  # float[run vocab rows]
    top = logits.amax(dim=1, keepdim=True)  # as torch.logsumexp: an infinite maximum shifts by 0
    top.masked_fill_(top.abs() == float("inf"), 0)
    shifted = (logits - top).exp_()
    lse = short_sum(list(shifted.unbind(1))).log_().add_(top[:, 0])  # float[run rows]
    log_softmax = logits.sub_(lse.unsqueeze(1))
    index = index.view(index.shape[0], 1, -1)
    picked = log_softmax.gather(1, index).view(mask.shape)
    log_probs = torch.where(mask, picked, torch.zeros((), dtype=picked.dtype, device=picked.device))
    probs = log_softmax.exp()
    entropy = short_sum(list((probs * log_softmax).unbind(1))).view(mask.shape).neg_()
    return log_probs, entropy, (probs, index)


def vocab_first_backward(kept, g: Tensor, z: Tensor, embedding: Tensor) -> tuple[Tensor, Tensor]:
    """`rows_backward` for `vocab_first_forward`'s layout: g float[run rows 1] -> (dL/dE's output part, dL/dz)."""
    probs, index = kept
    g = g.view(g.shape[0], 1, -1)  # float[run 1 rows]
    grad_logits = torch.zeros_like(probs).scatter_(1, index, g).sub_(probs * g)  # float[run vocab rows]
    return torch.bmm(grad_logits, z), torch.bmm(grad_logits.mT, embedding)


LAYOUTS = {False: (rows_forward, rows_backward), True: (vocab_first_forward, vocab_first_backward)}
"""vocab_first(tokens) -> the (forward, backward) pair the node runs."""
