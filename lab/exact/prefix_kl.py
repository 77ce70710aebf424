"""The exact sequence KL of the autoregressive policy by recursion over prefixes (chain rule).

    KL(p || r)(x) = sum_q  sum_{u: |u| = q, u content}  p(u | x)  KL(p(. | x, u) || r(. | x, u))
    p(u y | x)    = p(u | x) p(y | x, u)        logits_q(u) = base_q(x) + sum_{j<q} U[q, j, u_j]

with U[q, j, v, w] = E[v] C_qj E[w]^T, each previous token's contribution to a later position's
logits. Only prefixes without EOS carry on (a response ends at EOS), and the last position L-1
is the last conditional (truncation). The prefixes of length q are V^q, ordered as mixed radix
with u_0 most significant, so 1 + V + ... + V^(L-1) distributions per prompt: exact, and much
cheaper than the V^L + ... responses of `lab.exact.varlen.sequence_kl` (tested equal). Used for
the loop's `kl_exact` step metric; any leading axes (such as `run`) are kept.
"""

from __future__ import annotations

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


@torch.no_grad()
def tree_pass(params: dict[str, Tensor], prompts: Tensor,
              ref_levels: list[Tensor] | None) -> tuple[list[Tensor], Tensor, list[Tensor]]:
    """One pass over the prefix tree for the loop: (log-softmax levels, KL to `ref_levels`, pi(y) of every
    response in `lab.exact.varlen` order as pieces to concatenate), the same values as
    `prefix_log_softmaxes`, `tree_kl` and `lab.exact.ar_exploration.varlen_response_probs` (tested).

    Faster: each prefix's children's joint probability P(u) p(w | u) is formed once and serves the
    KL (sum over the level of joint * (log p - log r): one long reduction, not one per prefix), the
    ended responses (w = EOS) and the next level's weights; the work is laid out vocab first, so that
    reductions and broadcasts run along the prefixes (the returned levels are views in the usual layout).
    `ref_levels` None: the reference is this policy (KL 0; keep the returned levels as the reference)."""
    levels, pieces, kl, weight = [], [], None, None
    for base, prefix in level_parts(params, prompts):
        # vocab before prefixes (float[... batch vocab V^q]): every per-prefix max, sum and broadcast then
        # runs along the long prefix axis (along a last axis of 6 they run as millions of short loops)
        logits = base.unsqueeze(-1) + prefix.mT.contiguous().unsqueeze(-3)  # contiguous in the new layout
        content = logits.shape[-2] - 1
        top = logits.amax(dim=-2, keepdim=True)
        joint = (logits - top).exp_()  # float[... batch vocab V^q], unnormalised
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
    return levels, kl, pieces
