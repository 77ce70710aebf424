"""The policy's per-token log-probs as one autograd node, with its backward written out.

Forward (the same operations as `policy_logits` then `response_log_probs`):

    x           = E[prompts]                                  float[run batch (pos dim)]
    h           = x @ A                                       float[run batch dim]       (A: encode as [(pos dim) dim])
    z           = h @ D                                       float[run batch (pos dim)] (D: decode as [dim (pos dim)])
    logits      = z @ E^T                                     float[run batch pos vocab]
    log_softmax = logits - logsumexp(logits)
    log_probs   = log_softmax[y]                              float[run batch trial pos]

Backward, from g = dL/dlog_probs (p = softmax(logits); [y = v] is 1 where trial t drew v):

    dL/dlog_softmax[v] = sum_t g_t [y_t = v]                  (a scatter-add over trials)
    dL/dlogits         = dL/dlog_softmax - p * sum_v dL/dlog_softmax[v]   (the log-softmax Jacobian)
    dL/dz = dL/dlogits @ E          dL/dE  = dL/dlogits^T @ z + (dL/dx scattered back to the prompt tokens)
    dL/dh = dL/dz @ D^T             dL/dD  = h^T @ dL/dz
    dL/dx = dL/dh @ A^T             dL/dA  = x^T @ dL/dh

Autograd through the plain path records about twenty nodes per step (index_select, views,
three matmuls, logsumexp, gather, transposes) and pays its dispatch overhead on each; this is
one node with eleven kernels backward. It is a speed path only: `lab.policies.factorized.policy_logits` and
`lab.policies.sampling.response_log_probs` stay the reference, and tests/policies/test_fused.py checks the two agree
in value and gradient. Prompts are shared by every run (int[batch pos]), as in `lab.training.train`.
"""

from __future__ import annotations

import torch
from torch import Tensor


class _PolicyLogProbs(torch.autograd.Function):
    """(E, encode, decode, prompts, responses) -> (log_probs, log_softmax), all with a run axis."""

    @staticmethod
    def forward(ctx, embedding, encode, decode, prompts, responses):
        # `.mT` is the transpose of the last two axes (a view); each op is tiny, so Python's per-call
        # cost matters: shapes come from one place and no call is repeated
        runs, vocab, dim = embedding.shape
        batch, prompt_length = prompts.shape
        response_length = decode.shape[1]
        tokens = prompts.flatten()  # int[(batch pos)]
        x = embedding.index_select(1, tokens).view(runs, batch, prompt_length * dim)  # float[run batch (pos dim)]
        a = encode.view(runs, prompt_length * dim, dim)  # float[run (pos dim) dim]
        h = torch.bmm(x, a)  # float[run batch dim]
        d = decode.transpose(1, 2).reshape(runs, dim, response_length * dim)  # float[run dim (pos dim)]
        z = torch.bmm(h, d).view(runs, batch * response_length, dim)  # float[run (batch pos) dim]
        logits = torch.bmm(z, embedding.mT).view(runs, batch, response_length, vocab)
        log_softmax = logits.sub_(torch.logsumexp(logits, dim=-1, keepdim=True))  # float[run batch pos vocab]
        index = responses.mT  # int[run batch pos trial]
        log_probs = log_softmax.gather(-1, index).mT  # float[run batch trial pos]
        ctx.save_for_backward(embedding, a, d, x, h, z, log_softmax, index, tokens)
        ctx.mark_non_differentiable(log_softmax)
        return log_probs, log_softmax

    @staticmethod
    def backward(ctx, grad_log_probs, _grad_log_softmax):
        embedding, a, d, x, h, z, log_softmax, index, tokens = ctx.saved_tensors
        runs, batch, response_length, vocab = log_softmax.shape
        dim = embedding.shape[-1]
        # the scatter-add over trials: every trial that drew token v adds its gradient to v
        grad_ls = torch.zeros_like(log_softmax).scatter_add_(-1, index, grad_log_probs.mT)
        # log-softmax Jacobian: g - p * sum_v g, with p = exp(log_softmax); written as autograd
        # rounds it (g minus the product, matmuls in its operand order, the input layer's rows summed
        # from zero), so the gradient is bitwise the plain path's and a run keeps its exact trajectory
        grad_logits = grad_ls.sub_(log_softmax.exp().mul_(grad_ls.sum(-1, keepdim=True)))
        grad_logits = grad_logits.view(runs, batch * response_length, vocab)  # float[run (batch pos) vocab]
        grad_output = torch.bmm(z.mT, grad_logits).mT  # float[run vocab dim]
        grad_z = torch.bmm(grad_logits, embedding).view(runs, batch, response_length * dim)
        grad_d = torch.bmm(h.mT, grad_z)  # float[run dim (pos dim)]
        grad_h = torch.bmm(grad_z, d.mT)  # float[run batch dim]
        grad_a = torch.bmm(x.mT, grad_h)  # float[run (pos dim) dim]
        grad_x = torch.bmm(grad_h, a.mT).view(runs, -1, dim)  # float[run (batch pos) dim]
        # the input layer: every prompt token's gradient back to its row, then the output layer's
        grad_embedding = torch.zeros_like(embedding).index_add_(1, tokens, grad_x).add_(grad_output)
        grad_encode = grad_a.view(runs, -1, dim, dim)
        grad_decode = grad_d.view(runs, dim, response_length, dim).transpose(1, 2)  # autograd lays it out
        return grad_embedding, grad_encode, grad_decode, None, None


def policy_log_probs(embedding: Tensor, encode: Tensor, decode: Tensor, prompts: Tensor,
                     responses: Tensor) -> tuple[Tensor, Tensor]:
    """Per-token log-probs and the log-softmaxes they come from, through one autograd node.

    embedding float[... vocab dim], encode float[... pos dim dim], decode float[... pos dim dim]
    (`...`: an optional run axis), prompts int[batch pos] (shared by every run),
    responses int[... batch trial pos]  ->  log_probs float[... batch trial pos] (differentiable),
    log_softmax float[... batch pos vocab] (no gradient; for metrics such as the entropy).
    """
    if prompts.dim() != 2:
        raise ValueError(f"policy_log_probs takes prompts int[batch pos] shared by every run, "
                         f"got shape {tuple(prompts.shape)}")
    if embedding.dim() == 2:  # one policy: give it a run axis of one, then take it away
        log_probs, log_softmax = _PolicyLogProbs.apply(embedding.unsqueeze(0), encode.unsqueeze(0),
                                                       decode.unsqueeze(0), prompts, responses.unsqueeze(0))
        return log_probs.squeeze(0), log_softmax.squeeze(0)
    return _PolicyLogProbs.apply(embedding, encode, decode, prompts, responses)
