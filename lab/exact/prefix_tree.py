"""The exact sequence KL of the autoregressive policy by recursion over prefixes (chain rule).

    KL(p || r)(x) = sum_q  sum_{u: |u| = q, u content}  p(u | x)  KL(p(. | x, u) || r(. | x, u))
    p(u y | x)    = p(u | x) p(y | x, u)        logits_q(u) = base_q(x) + sum_{j<q} U[q, j, u_j]

with U[q, j, v, w] = E[v] C_qj E[w]^T, each previous token's contribution to a later position's
logits. Only prefixes without EOS carry on (a response ends at EOS), and the last position L-1
is the last conditional (truncation). The prefixes of length q are V^q, ordered as mixed radix
with u_0 most significant, so 1 + V + ... + V^(L-1) distributions per prompt: exact, and much
cheaper than the V^L + ... responses of `lab.exact.varlen.sequence_kl` (tested equal). The loop's
one pass per epoch (`tree_pass`, behind `kl_exact`, `optimal_prob` and `zero_std_prob`) factors each
softmax into the prompt's part and the prefix's part; any leading axes (such as `run`) are kept.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from lab.policies.ar_model import prompt_state


def level_parts(params: dict[str, Tensor], prompts: Tensor):
    """Yield (base_q float[... batch vocab+1], prefix part float[... V^q vocab+1]) for each length q in turn:
    logits_q(u) = base_q(x) + sum_{j<q} U[q, j, u_j], the second term the same for every prompt."""
    embedding, previous = params["embedding"], params["previous"]
    length, content = previous.shape[-4], embedding.shape[-2] - 1
    base = torch.einsum("...bqe,...ve->...bqv", prompt_state(embedding, params["encode"], params["decode"],
                                                             prompts), embedding)  # float[... batch q vocab]
    causal = torch.ones(length, length, dtype=embedding.dtype, device=embedding.device).tril(-1)
    # U[q, j, v, w]: token v at position j adds to position q's logit of w (0 unless j < q)
    table = torch.einsum("...vd,...qjde,...we->...qjvw", embedding, previous, embedding) * causal[..., None, None]
    for q in range(length):
        prefix = base.new_zeros(*base.shape[:-3], 1, base.shape[-1])  # float[... 1 vocab]: the empty prefix
        for j in range(q):  # extend every prefix by each content token at position j
            step = table[..., q, j, None, :content, :]  # float[... 1 V vocab]: every prefix
            prefix = (prefix.unsqueeze(-2) + step).flatten(-3, -2)  # float[... (prefix V) vocab]
        yield base[..., q, :], prefix


def level_logits(params: dict[str, Tensor], prompts: Tensor):
    """Yield logits_q(u) for every content prefix u of each length q in turn: float[... batch V^q vocab+1]."""
    for base, prefix in level_parts(params, prompts):
        yield base.unsqueeze(-2) + prefix.unsqueeze(-3)


def prefix_log_softmaxes(params: dict[str, Tensor], prompts: Tensor) -> list[Tensor]:
    """log p(. | x, u) for every content prefix u of each length q: float[... batch V^q vocab+1] per q."""
    return [logits - torch.logsumexp(logits, dim=-1, keepdim=True) for logits in level_logits(params, prompts)]


def tree_kl(levels: list[Tensor], ref_levels: list[Tensor]) -> Tensor:
    """KL(p || r) over whole responses from both policies' prefix log-softmaxes: float[... batch]."""
    content = levels[-1].shape[-1] - 1
    weight = torch.ones_like(levels[0][..., 0])  # p(u | x) of the prefixes of this length
    total = torch.zeros_like(weight[..., 0])
    for log_p, log_r in zip(levels, ref_levels):
        p = log_p.exp()
        total = total + (weight * (p * (log_p - log_r)).sum(dim=-1)).sum(dim=-1)
        weight = (weight.unsqueeze(-1) * p[..., :content]).flatten(-2)
    return total.clamp_min(0)  # a KL is >= 0; rounding can leave -1e-9 where the policies agree


def varlen_response_probs(levels: list[Tensor]) -> Tensor:
    """pi(y | x) of every response from the prefix levels: float[... batch V^q vocab+1] per q -> float[... batch n]."""
    content = levels[0].shape[-1] - 1
    weight = torch.ones_like(levels[0][..., 0])  # P(u | x) of the prefixes of this length
    ended = []
    for log_p in levels:
        p = log_p.exp()
        ended.append(weight * p[..., content])  # u followed by EOS
        weight = (weight.unsqueeze(-1) * p[..., :content]).flatten(-2)
    return torch.cat([*ended, weight], dim=-1)  # the last weight: the truncated responses of L tokens


class TreeLevels(NamedTuple):
    """A policy's prefix tree in factored form: for every content prefix u of each length q,

        log p(w | x, u) = bases[q][x, w] + prefixes[q][u, w] - lses[q][x, u]

    bases float[... batch vocab+1], prefixes float[... 1|batch V^q vocab+1] (the prompt-free part
    of `level_parts`; or whole log-softmaxes, with zero bases and lses: `TreeLevels.of`),
    lses float[... batch V^q]."""
    bases: list[Tensor]
    prefixes: list[Tensor]
    lses: list[Tensor]

    def log_softmax(self, q: int) -> Tensor:
        """log p(. | x, u) for the prefixes of length q: float[... batch V^q vocab+1]."""
        return self.bases[q].unsqueeze(-2) + self.prefixes[q] - self.lses[q].unsqueeze(-1)

    def log_softmaxes(self) -> list[Tensor]:
        """Every level's, as `prefix_log_softmaxes`."""
        return [self.log_softmax(q) for q in range(len(self.lses))]

    @staticmethod
    def of(levels: list[Tensor]) -> "TreeLevels":
        """Whole log-softmax levels (`prefix_log_softmaxes`) in this form."""
        return TreeLevels([t.new_zeros(t.shape[:-2] + t.shape[-1:]) for t in levels], list(levels),
                          [t.new_zeros(t.shape[:-1]) for t in levels])


@torch.no_grad()
def tree_pass(params: dict[str, Tensor], prompts: Tensor,
              reference: TreeLevels | None) -> tuple[TreeLevels, Tensor, list[Tensor]]:
    """One pass over the prefix tree for the loop: (this policy's `TreeLevels`, its KL to `reference`
    float[... batch], pi(y) of every response in `lab.exact.varlen` order as pieces to concatenate):
    the values of `prefix_log_softmaxes`, `tree_kl` and `varlen_response_probs` (tested).
    `reference` None: the reference is this policy (KL 0; keep the returned levels as the reference).

    Faster, because the softmax factorises into the prompt's part and the prefix's part of the logits
    (the second the same for every prompt), so no exp runs per prompt and prefix:

        p(w | x, u)  = eb[x, w] ep[u, w] / total[x, u]    eb = exp(base - max base), ep = exp(prefix - max prefix)
        total[x, u]  = sum_w eb[x, w] ep[u, w]             (a matmul; log total + the maxes is the lse)
        P(u w | x)   = s[x, u] ep[u, w] eb[x, w]           s = P(u | x) / total
        KL_q(x)      = sum_w d_base[x, w] sum_u P(u w | x) + sum_{u,w} P(u w | x) d_prefix[u, w]
                       - sum_u P(u | x) d_lse[x, u]

    The KL is sum over u, w of P(u w | x) (log p - log r) split by the three parts of log p - log r
    (d = this policy's part - the reference's), so each level's joint P(u w | x), which the ended
    responses (w = EOS) and the next level's P(u | x) need anyway, is read twice more and nothing
    else is formed per prompt and prefix (against a factored reference; against whole log-softmaxes,
    from a fallback, log p - log r is formed per element). Sums of s ep alone would pass the largest
    float where a normaliser is tiny; each joint is at most 1. A normaliser is small where the two
    parts peak at different tokens; below the dtype's smallest normal number (the parts at odds by
    about 87 in float32: from init scales between about 1.7 and 2.7 on in the lecture's setting,
    by seed, and in some epochs of fast-learning runs) `_stable_pass` computes the tree with each
    prefix's own maximum. Every level's normalisers are checked first, at one host sync, so
    falling back wastes only them.

    A speed path, tested (as is `_stable_pass`) against the plain functions (tests/exact/test_sequence_kl.py).
    Measured at 500 runs and one thread: 0.075 s CPU an epoch against `_stable_pass`'s 0.115 s (medians
    of 15 interleaved pairs; best 0.052 against 0.096), 0.04 s of the 0.45 s CPU of a 500-run
    autoregressive epoch: about 9% of that `lab bench` row (busy 2-core machine).
    """
    levels, factors, safe = TreeLevels([], [], []), [], []
    tiny = torch.finfo(params["embedding"].dtype).tiny
    for base, prefix in level_parts(params, prompts):  # the normalisers first: checked before the joints
        top_base, top_prefix = base.amax(dim=-1, keepdim=True), prefix.amax(dim=-1, keepdim=True)
        eb, ep = (base - top_base).exp(), (prefix - top_prefix).exp()  # float[... batch vocab], [... V^q vocab]
        total = eb @ ep.mT  # float[... batch V^q], each >= the largest term, which is >= exp(-spread)
        safe.append((total >= tiny).all())  # False for NaN too
        levels.bases.append(base), levels.prefixes.append(prefix.unsqueeze(-3))
        levels.lses.append(total.log().add_(top_base).add_(top_prefix.mT))
        factors.append((eb, ep, total))
    if not bool(torch.stack(safe).all()):
        return _stable_pass(params, prompts, reference)

    pieces, kl, weight = [], None, None  # weight: P(u | x) of the prefixes of this length, float[... batch V^q]
    for q, (eb, ep, total) in enumerate(factors):
        scale = total.reciprocal() if weight is None else weight / total  # s[x, u] <= 1 / tiny: finite
        content = eb.shape[-1] - 1
        ended = (scale * ep[..., content].unsqueeze(-2)).mul_(eb[..., content, None])  # float[... batch V^q]
        # the content children, the largest tensor (at the last level, every truncated response): a
        # contiguous factor and an in-place product run twice as fast as broadcasting the strided slices
        joint = (scale.unsqueeze(-1) * ep[..., :content].contiguous().unsqueeze(-3)).mul_(eb[..., None, :content])
        if reference is not None and reference.prefixes[q].shape[-3] == 1:  # factored, as this one
            mine, theirs = levels.prefixes[q], reference.prefixes[q]  # float[... 1 V^q vocab]
            d_base, d_lse = levels.bases[q] - reference.bases[q], levels.lses[q] - reference.lses[q]
            term = ((joint.sum(-2) * d_base[..., :content]).sum(-1) + ended.sum(-1) * d_base[..., content]
                    + _dot(joint, mine[..., :content] - theirs[..., :content])  # contiguous: flattens as a view
                    + _dot(ended.unsqueeze(-1), mine[..., content:] - theirs[..., content:])
                    - (d_lse if weight is None else weight * d_lse).sum(-1))
            kl = term if kl is None else kl + term
        elif reference is not None:  # whole log-softmaxes (from `_stable_pass`): log p - log r per element,
            # since the parts' separate sums, each the size of the logits, would cancel to a worse KL
            gap = levels.log_softmax(q) - reference.log_softmax(q)  # float[... batch V^q vocab]
            term = _dot(joint, gap[..., :content].contiguous()) + _dot(ended.unsqueeze(-1), gap[..., content:])
            kl = term if kl is None else kl + term
        pieces.append(ended)  # u followed by EOS
        weight = joint.flatten(-2)  # P(u w | x) in the order (u, w) of the next level
    pieces.append(weight)  # the truncated responses of L tokens
    kl = torch.zeros_like(weight[..., 0]) if kl is None else kl.clamp_min(0)
    return levels, kl, pieces


def _dot(joint: Tensor, table: Tensor) -> Tensor:
    """sum over u, w of joint[x, u, w] table[x or any, u, w]: joint float[... batch V^q k], table
    float[... 1|batch V^q k] -> float[... batch]; one matmul per run where the table is the same for
    every prompt."""
    if table.shape[-3] == 1:
        return (joint.flatten(-2) @ table.flatten(-2).mT).squeeze(-1)  # [... batch n] @ [... n 1]
    return (joint.flatten(-2).unsqueeze(-2) @ table.flatten(-2).unsqueeze(-1)).flatten(-2)[..., 0]


def _stable_pass(params: dict[str, Tensor], prompts: Tensor,
                 reference: TreeLevels | None) -> tuple[TreeLevels, Tensor, list[Tensor]]:
    """`tree_pass` with each prefix's logits formed and shifted by their own maximum (stable at any
    spread, and about 1.3x slower at 500 runs). Each prefix's children's joint probability P(u) p(w | u)
    serves the KL (one dot product per level), the ended responses and the next level's weights; the
    work is laid out vocab first, so reductions and broadcasts run along the long prefix axis."""
    ref_levels = None if reference is None else reference.log_softmaxes()
    levels, pieces, kl, weight = [], [], None, None
    for base, prefix in level_parts(params, prompts):
        logits = base.unsqueeze(-1) + prefix.mT.contiguous().unsqueeze(-3)  # float[... batch vocab V^q]
        content = logits.shape[-2] - 1
        top = logits.amax(dim=-2, keepdim=True)
        joint = (logits - top).exp_()  # unnormalised
        total = joint.sum(dim=-2, keepdim=True)  # float[... batch 1 V^q]
        log_p = logits.sub_(top.add_(total.log()))  # in place: logits - logsumexp
        joint.mul_(total.reciprocal_() if weight is None else weight.unsqueeze(-2) / total)  # P(u) p(w | u)
        if ref_levels is not None:  # sum over the level of joint * (log p - log r), as one dot product
            gap = (log_p - ref_levels[len(levels)].mT).flatten(-2).unsqueeze(-1)  # float[... batch (vocab V^q) 1]
            term = (joint.flatten(-2).unsqueeze(-2) @ gap).flatten(-2)[..., 0]  # float[... batch]
            kl = term if kl is None else kl + term
        levels.append(log_p.mT)  # a view in the levels' layout float[... batch V^q vocab]
        pieces.append(joint[..., content, :])  # u followed by EOS
        weight = joint[..., :content, :].mT.flatten(-2)  # P(u w), in the order (u, w) of the next level
    pieces.append(weight)  # the truncated responses of L tokens
    kl = torch.zeros_like(weight[..., 0]) if kl is None else kl.clamp_min(0)
    return TreeLevels.of(levels), kl, pieces
