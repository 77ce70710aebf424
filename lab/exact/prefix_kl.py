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

from lab.policies.autoregressive import prompt_state


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

    def log_softmaxes(self) -> list[Tensor]:
        """log p(. | x, u): float[... batch V^q vocab+1] per q, as `prefix_log_softmaxes`."""
        return [base.unsqueeze(-2) + prefix - lse.unsqueeze(-1)
                for base, prefix, lse in zip(self.bases, self.prefixes, self.lses)]

    @staticmethod
    def of(levels: list[Tensor]) -> "TreeLevels":
        """Whole log-softmax levels (`prefix_log_softmaxes`) in this form."""
        return TreeLevels([t.new_zeros(t.shape[:-2] + t.shape[-1:]) for t in levels], list(levels),
                          [t.new_zeros(t.shape[:-1]) for t in levels])


def _per_prompt(scale: Tensor, table: Tensor) -> Tensor:
    """sum_u scale[x, u] table[x or any, u, w]: scale float[... batch V^q], table float[... 1|batch V^q vocab]
    -> float[... batch vocab]; one matmul per run where the table is the same for every prompt."""
    if table.shape[-3] == 1:
        return scale @ table.squeeze(-3)
    return (scale.unsqueeze(-2) @ table).squeeze(-2)


@torch.no_grad()
def tree_pass(params: dict[str, Tensor], prompts: Tensor,
              reference: TreeLevels | None) -> tuple[TreeLevels, Tensor, list[Tensor]]:
    """One pass over the prefix tree for the loop: (this policy's `TreeLevels`, its KL to `reference`
    float[... batch], pi(y) of every response in `lab.exact.varlen` order as pieces to concatenate):
    the values of `prefix_log_softmaxes`, `tree_kl` and `varlen_response_probs` (tested).
    `reference` None: the reference is this policy (KL 0; keep the returned levels as the reference).

    Faster, because the softmax factorises into the prompt's part and the prefix's part of the logits
    (the second the same for every prompt), so no exp or log runs per prompt and prefix:

        p(w | x, u)  = eb[x, w] ep[u, w] / total[x, u]    eb = exp(base - max base), ep = exp(prefix - max prefix)
        total[x, u]  = sum_w eb[x, w] ep[u, w]             (a matmul; log total + the maxes is the lse)
        P(u w | x)   = s[x, u] eb[x, w] ep[u, w]           s = P(u | x) / total: the next level's P(u | x)
        KL_q(x)      = sum_w eb[x, w] (d_base[x, w] (s ep)[x, w] + (s (ep d_prefix))[x, w]) - sum_u P(u | x) d_lse[x, u]

    The KL is sum over u, w of P(u w | x) (log p - log r), split by the three parts of log p - log r
    (d = this policy's part - the reference's): two matmuls with s per level. Only the responses'
    probabilities are formed per prompt and prefix. If a normaliser underflows (both parts of the
    logits spread by more than about 87 in float32), the plain functions compute the same values.
    """
    levels = TreeLevels([], [], [])
    pieces, kl, weight = [], None, None  # weight: P(u | x) of the prefixes of this length, float[... batch V^q]
    tiny = torch.finfo(params["embedding"].dtype).tiny
    for q, (base, prefix) in enumerate(level_parts(params, prompts)):
        top_base, top_prefix = base.amax(dim=-1, keepdim=True), prefix.amax(dim=-1, keepdim=True)
        eb, ep = (base - top_base).exp(), (prefix - top_prefix).exp()  # float[... batch vocab], [... V^q vocab]
        total = eb @ ep.mT  # float[... batch V^q], each >= the largest term, which is >= exp(-spread)
        if not bool((total >= tiny).all()):
            return _plain_pass(params, prompts, reference)
        lse = total.log().add_(top_base).add_(top_prefix.mT)
        levels.bases.append(base), levels.prefixes.append(prefix.unsqueeze(-3)), levels.lses.append(lse)
        scale = total.reciprocal() if weight is None else weight / total  # s[x, u]
        if reference is not None:
            d_prefix = levels.prefixes[q] - reference.prefixes[q]  # float[... 1|batch V^q vocab]
            by_base = (scale @ ep) * (base - reference.bases[q])
            by_prefix = _per_prompt(scale, ep.unsqueeze(-3) * d_prefix)
            d_lse = lse - reference.lses[q]
            term = (eb * (by_base + by_prefix)).sum(-1) - (d_lse if weight is None else weight * d_lse).sum(-1)
            kl = term if kl is None else kl + term
        content = base.shape[-1] - 1
        pieces.append(scale * ep[..., content].unsqueeze(-2) * eb[..., content, None])  # u followed by EOS
        # the largest tensor (at the last level, every truncated response): a contiguous factor and an
        # in-place product run twice as fast as broadcasting the strided slices
        weight = (scale.unsqueeze(-1) * ep[..., :content].contiguous().unsqueeze(-3)).mul_(eb[..., None, :content])
        weight = weight.flatten(-2)
    pieces.append(weight)  # the truncated responses of L tokens
    kl = torch.zeros_like(weight[..., 0]) if kl is None else kl.clamp_min(0)
    return levels, kl, pieces


def _plain_pass(params: dict[str, Tensor], prompts: Tensor,
                reference: TreeLevels | None) -> tuple[TreeLevels, Tensor, list[Tensor]]:
    """`tree_pass` by the plain functions (each log-softmax stable on its own)."""
    levels = prefix_log_softmaxes(params, prompts)
    kl = (tree_kl(levels, reference.log_softmaxes()) if reference is not None
          else levels[0].new_zeros(levels[0].shape[:-2]))
    return TreeLevels.of(levels), kl, [varlen_response_probs(levels)]
