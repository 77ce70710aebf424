"""The autoregressive policy's teacher-forced log-probs as one autograd node, backward written out.

Forward (the same function as `teacher_forced_logits` then `masked_log_probs` under the response's
own mask, regrouped):

    h        = E[prompts] @ A                                    float[run batch dim]
    z0_q     = h @ B_q                                           float[run batch pos dim]
    T[v,j,q] = E[v] @ C_qj          (C masked to j < q)          float[run (V j) (q dim)], v < EOS, j < L-1
    z_q      = z0_q + sum_j T[y_j, j, q]  =  z0 + onehot(y) @ T   float[run (batch trial) (q dim)], q >= 1
    logits   = z @ E^T;  log_softmax = logits - logsumexp;  log_probs = mask * log_softmax[y]
    entropy  = -sum_w p_w log_softmax_w       (p = exp(log_softmax), kept for the backward)

The previous-token term is a table T of every token's contribution to every later position, so
the sum over earlier tokens is one matmul with the responses' one-hot codes (V x (L-1) columns)
instead of a product of every emitted embedding with every C_qj. The table keeps only what reaches
a live position, so the mask must be the responses' own (`lab.policies.response_mask`: live up to the
first EOS): at live positions the values are the plain path's, at padding they are not.
Backward, with g = dL/dlog_probs (0 on padding), p = softmax(logits), Y = onehot(y):

    dL/dlogits = g (Y - p);   dL/dz = dL/dlogits @ E;   dL/dz0 = sum over trials of dL/dz
    dL/dT = onehot^T @ dL/dz;  dL/dC_qj = E^T dL/dT[., j, q] (masked to j < q);  dL/dE gets E's three uses

A speed path only: the plain path (`lab.policies.ar_model.teacher_forced_logits`, then
`lab.policies.masked_log_probs`) is the reference, and tests/policies/test_fused.py checks that the two
agree in value and gradient. Prompts are shared by every run (int[batch pos]), as in the loop.
"""

from __future__ import annotations

import torch
from torch import Tensor


def causal(length: int, dim: int, like: Tensor) -> Tensor:
    """float[(j q e)]: 1 where j < q, laid out as the table's columns per token. Masking the table
    T[v, j, q] = E[v] C_qj (and its gradient) is masking C, on 6/10 of C's size and with 250
    contiguous values per row (a [q j 1 1] broadcast over C runs as many short loops)."""
    mask = torch.ones(length, length, device=like.device, dtype=like.dtype).triu(1)  # [j q]: j < q
    return mask[..., None].expand(length, length, dim).flatten()


class _ARLogProbs(torch.autograd.Function):
    """(E, encode, decode, previous, prompts, responses, mask) -> (log_probs, entropy), with a run axis."""

    @staticmethod
    def forward(ctx, embedding, encode, decode, previous, prompts, responses, mask):
        runs, tokens_, dim = embedding.shape
        batch, prompt_length = prompts.shape
        trials, length = responses.shape[-2:]
        prompt_tokens = prompts.flatten()
        x = embedding.index_select(1, prompt_tokens).view(runs, batch, prompt_length * dim)
        a = encode.reshape(runs, prompt_length * dim, dim)
        h = torch.bmm(x, a)  # float[run batch dim]
        b = decode.transpose(1, 2).reshape(runs, dim, length * dim)  # float[run dim (q e)]
        z0 = torch.bmm(h, b)  # float[run batch (q e)]
        # a view where C is stored as [run d j q e] (AutoregressiveStack), else a copy
        c = previous.permute(0, 3, 2, 1, 4).reshape(runs, dim, -1)  # float[run d (j q e)]
        # Only content tokens before the last position reach a live later one (EOS ends a response), so
        # the table keeps rows v < EOS and j < L-1, and the sum runs over columns q >= 1: the terms left
        # out are exact zeros at live positions (padding differs, and is masked). Leaving out rows or
        # columns of a matrix product changes no bit of the others, so trajectories are unchanged.
        content, reach = tokens_ - 1, length - 1
        width = reach * length * dim  # columns (j q e) with j < L-1
        table = torch.bmm(embedding[:, :content], c[..., :width]).mul_(causal(length, dim, x)[:width])
        table = table.view(runs, content * reach, length * dim)[..., dim:]  # rows (v j), columns (q>=1 e)
        code = (responses[..., :reach].reshape(runs, batch * trials, reach) * reach
                + torch.arange(reach, device=x.device))  # column (v j) of token v at position j
        onehot = torch.zeros(runs, batch * trials, tokens_ * reach, dtype=x.dtype, device=x.device)
        onehot = onehot.scatter_(-1, code, 1.0)[..., :content * reach]  # float[run (batch trial) (v j)], no EOS
        later = torch.bmm(onehot, table).view(runs, batch, trials, (length - 1) * dim)
        z = x.new_empty(runs, batch, trials, length * dim)  # z0 + the earlier tokens' terms (none at q = 0)
        z[..., :dim] = z0[..., None, :dim]
        torch.add(later, z0[..., None, dim:], out=z[..., dim:])
        z = z.view(runs, -1, dim)  # float[run (batch trial q) dim]
        logits = torch.bmm(z, embedding.mT)
        log_softmax = logits.sub_(torch.logsumexp(logits, dim=-1, keepdim=True))  # float[run (b t q) vocab]
        index = responses.reshape(runs, -1, 1)
        picked = log_softmax.gather(-1, index).view(responses.shape)
        log_probs = torch.where(mask, picked, torch.zeros((), dtype=picked.dtype, device=picked.device))
        probs = log_softmax.exp()
        # the entropy metric here, where p is at hand, rather than from the stored log-softmaxes of a block
        # of steps; the sum over the few tokens as a matmul (a reduction over a last axis of V + 1 runs as
        # many short loops)
        ones = torch.ones(tokens_, 1, dtype=x.dtype, device=x.device)
        entropy = ((probs * log_softmax) @ ones).view(responses.shape).neg_()
        ctx.save_for_backward(embedding, a, b, c, x, h, z, probs, onehot, index, prompt_tokens, mask)
        ctx.mark_non_differentiable(entropy)
        return log_probs, entropy

    @staticmethod
    def backward(ctx, grad_log_probs, _grad_entropy):
        embedding, a, b, c, x, h, z, probs, onehot, index, prompt_tokens, mask = ctx.saved_tensors
        runs, tokens_, dim = embedding.shape
        batch, trials, length = mask.shape[-3:]
        g = torch.where(mask, grad_log_probs, torch.zeros((), dtype=grad_log_probs.dtype))
        g = g.reshape(runs, -1, 1)  # float[run (b t q) 1]
        grad_logits = torch.zeros_like(probs).scatter_(-1, index, g).sub_(probs * g)
        grad_embedding = torch.bmm(grad_logits.mT, z)  # the output layer: float[run vocab dim]
        grad_z = torch.bmm(grad_logits, embedding).view(runs, batch, trials, length * dim)
        grad_z0 = grad_z.sum(dim=2)  # float[run batch (q e)]
        later = torch.bmm(onehot.mT, grad_z.view(runs, batch * trials, -1)[..., dim:])  # the forward's rows, columns
        content, reach = tokens_ - 1, length - 1
        grad_table = grad_z.new_zeros(runs, tokens_, length, length * dim)  # float[run v j (q e)]
        grad_table[:, :content, :reach, dim:] = later.view(runs, content, reach, (length - 1) * dim)
        grad_table = grad_table.view(runs, tokens_, -1).mul_(causal(length, dim, grad_table))  # C_qj, j >= q: none
        grad_embedding += torch.bmm(grad_table, c.mT)  # the table's rows E[v]
        # E^T as a contiguous copy: the same values, and about four times faster than the transposed view
        grad_c = torch.bmm(embedding.mT.contiguous(), grad_table).view(runs, dim, length, length, dim)
        # float[run q j d e] and float[run q d e] as views: autograd lays them out as the parameters are
        # stored (no copy where the stack stores them permuted, as the forward reads them)
        grad_previous = grad_c.permute(0, 3, 2, 1, 4)
        grad_decode = torch.bmm(h.mT, grad_z0).view(runs, dim, length, dim).transpose(1, 2)
        grad_h = torch.bmm(grad_z0, b.mT)  # float[run batch dim]
        grad_encode = torch.bmm(x.mT, grad_h).view(runs, -1, dim, dim)
        grad_x = torch.bmm(grad_h, a.mT).view(runs, -1, dim)  # float[run (batch pos) dim]
        grad_embedding.index_add_(1, prompt_tokens, grad_x)  # the input layer
        return grad_embedding, grad_encode, grad_decode, grad_previous, None, None, None


def ar_log_probs(embedding: Tensor, encode: Tensor, decode: Tensor, previous: Tensor, prompts: Tensor,
                 responses: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per-token log-probs (0 on padding) and the entropy of each position's next token, through one node.

    Parameters with an optional leading run axis, prompts int[batch pos] (shared by every run),
    responses int[... batch trial pos], mask bool[... batch trial pos] (`lab.policies.response_mask` of
    the responses: live up to the first EOS; the node relies on it) -> log_probs float[... batch
    trial pos] (differentiable) and entropy float[... batch trial pos] (no gradient; at padding
    positions, where the mask is False, it is not the policy's: read it only where the mask is True).
    """
    if prompts.dim() != 2:
        raise ValueError(f"ar_log_probs takes prompts int[batch pos] shared by every run, "
                         f"got shape {tuple(prompts.shape)}")
    if embedding.dim() == 2:  # one policy: a run axis of one
        out = _ARLogProbs.apply(*(p.unsqueeze(0) for p in (embedding, encode, decode, previous)), prompts,
                                responses.unsqueeze(0), mask.unsqueeze(0))
        return out[0].squeeze(0), out[1].squeeze(0)
    return _ARLogProbs.apply(embedding, encode, decode, previous, prompts, responses, mask)
