"""The autoregressive policy's equations, as pure functions of its parameters (each may carry a `run` axis).

    h          = sum_p  E[x_p] @ A_p                                (the lecture's encoder, unchanged)
    z_q        = h @ B_q  +  sum_{j<q} E[y_j] @ C_qj                (C_qj: previous-token matrix, j < q)
    logits_q   = z_q @ E^T                                          over V + 1 tokens: 0..V-1 and EOS = V
    mask_q     = 1 while no EOS comes before q                      (padding after EOS is masked out)

The module `lab.policies.autoregressive` wraps them in the policy classes; decoding
(`lab.policies.ar_decoding`) and the exact prefix tree (`lab.exact.prefix_tree`) call them directly.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lab.policies.factorized import embed, init_parameters


def causal_mask(length: int, device=None, dtype: torch.dtype | None = None) -> Tensor:
    """float[q j 1 1]: 1 where j < q (position q sees the tokens emitted before it)."""
    return torch.ones(length, length, device=device, dtype=dtype).tril(-1)[..., None, None]


def init_autoregressive(vocab_size: int, prompt_length: int, max_length: int, dim: int,
                        generator: torch.Generator | None = None, device=None,
                        init_scale: float = 1.0, dtype: torch.dtype | None = None) -> dict[str, Tensor]:
    """One policy's parameters; `vocab_size` counts content tokens (EOS is the extra id vocab_size).

    `init_scale` multiplies the whole embedding, EOS row included, as `lab.policies.factorized.init_parameters`
    does the lecture's (the same draws at every scale).
    """
    device = generator.device if generator is not None else device
    lecture = init_parameters(vocab_size, prompt_length, max_length, dim, generator, device, init_scale, dtype)
    eos_row = torch.randn(1, dim, generator=generator, device=device, dtype=dtype) * init_scale  # as nn.Embedding
    previous = torch.randn(max_length, max_length, dim, dim, generator=generator, device=device,
                           dtype=dtype) / math.sqrt(dim)
    return {
        "embedding": torch.cat([lecture["embedding"], eos_row]),  # float[(vocab + 1) dim]
        "encode": lecture["encode"],  # float[pos dim dim]
        "decode": lecture["decode"],  # float[pos dim dim]
        "previous": previous * causal_mask(max_length, device, dtype),  # float[q j dim dim]
    }


def lookup(embedding: Tensor, tokens: Tensor) -> Tensor:
    """Rows of E: embedding float[... vocab dim], tokens int[... batch trial pos] -> float[... batch trial pos dim].

    The tokens carry the embedding's leading axes, or none (then shared by every leading index).
    """
    if embedding.dim() == 2:
        return embedding[tokens]
    lead = embedding.shape[:-2]
    tokens = tokens.expand(*lead, *tokens.shape[-3:]) if tokens.dim() == 3 else tokens
    index = tokens.reshape(*lead, -1, 1).expand(*lead, -1, embedding.shape[-1])
    return embedding.gather(-2, index).reshape(*tokens.shape, embedding.shape[-1])


def prompt_state(embedding: Tensor, encode: Tensor, decode: Tensor, prompts: Tensor) -> Tensor:
    """h @ B_q for every prompt and position: float[... batch pos dim] (the lecture's z_q)."""
    batch, prompt_length = prompts.shape[-2:]
    dim = embedding.shape[-1]
    x = embed(embedding, prompts)  # float[... (batch pos) dim]
    h = x.reshape(*x.shape[:-2], batch, prompt_length * dim) @ encode.flatten(-3, -2)  # float[... batch dim]
    return torch.einsum("...bd,...qde->...bqe", h, decode)


def teacher_forced_logits(embedding: Tensor, encode: Tensor, decode: Tensor, previous: Tensor,
                          prompts: Tensor, responses: Tensor) -> Tensor:
    """Logits of every position given the response's own earlier tokens.

    prompts int[... batch pos], responses int[... batch trial pos] -> float[... batch trial pos vocab+1].
    """
    length = previous.shape[-4]
    emitted = lookup(embedding, responses)  # float[... batch trial j dim]
    causal = previous * causal_mask(length, previous.device).to(previous)
    # "... batch trial j d, ... q j d e -> ... batch trial q e": the sum over earlier tokens j < q
    z = prompt_state(embedding, encode, decode, prompts).unsqueeze(-3) + torch.einsum(
        "...btjd,...qjde->...btqe", emitted, causal)
    return torch.einsum("...btqe,...ve->...btqv", z, embedding)  # tied output: z_q @ E^T


def response_mask(responses: Tensor, eos: int) -> Tensor:
    """Live tokens: position q is live when no EOS comes before it. int[... pos] -> bool[... pos]."""
    ended = (responses == eos).long().cumsum(dim=-1)  # EOS seen at or before q
    return (ended - (responses == eos).long()) == 0
