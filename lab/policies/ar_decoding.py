"""Decoding the autoregressive policy one position at a time: sampling and greedy responses.

    z_q = h @ B_q + sum_{j<q} E[y_j] @ C_qj,   y_q = choose(q, z_q @ E^T),   after EOS: EOS (padding)

Each emitted token's contribution to every later position is added once (`z_history`), so a
position costs one small matmul. Sampling draws by inverse CDF from uniforms drawn up front.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lab.policies.ar_model import lookup, prompt_state


def decode_step(z: Tensor, embedding: Tensor) -> Tensor:
    """Logits from z float[... batch trial dim]: float[... batch trial vocab+1]."""
    return torch.einsum("...bte,...ve->...btv", z, embedding)  # tied output: z_q @ E^T


def generate(embedding: Tensor, encode: Tensor, decode: Tensor, previous: Tensor, prompts: Tensor,
             choose, num_trials: int) -> Tensor:
    """Emit responses one position at a time; `choose(q, logits float[... batch trial vocab+1])` picks tokens.

    After a sequence's EOS every later position is EOS (padding), whatever `choose` returns.
    Returns int[... batch trial pos].
    """
    eos = embedding.shape[-2] - 1
    length = previous.shape[-4]
    base = prompt_state(embedding, encode, decode, prompts)  # float[... batch pos dim]
    lead_batch = base.shape[:-2]
    z_history = torch.zeros(*lead_batch, num_trials, length, base.shape[-1], device=base.device, dtype=base.dtype)
    tokens = torch.full((*lead_batch, num_trials, length), eos, dtype=torch.long, device=base.device)
    done = torch.zeros(*lead_batch, num_trials, dtype=torch.bool, device=base.device)
    for q in range(length):
        z = base[..., q, :].unsqueeze(-2) + z_history[..., q, :]  # float[... batch trial dim]
        token = torch.where(done, eos, choose(q, decode_step(z, embedding)))
        tokens[..., q] = token
        done = done | (token == eos)
        if q + 1 < length:  # add this token's contribution to every later position
            e = lookup(embedding, token.unsqueeze(-1)).squeeze(-2)  # float[... batch trial dim]
            z_history[..., q + 1:, :] += torch.einsum("...btd,...qde->...btqe", e, previous[..., q + 1:, q, :, :])
    return tokens


def sample(embedding, encode, decode, previous, prompts: Tensor, num_trials: int,
           generator: torch.Generator | Sequence[torch.Generator] | None = None) -> Tensor:
    """Draw `num_trials` responses per prompt, int[... batch trial pos], by inverse CDF.

    One uniform per (batch, trial, pos) is drawn up front, as in `lab.policies.sampling.sample_responses`
    (a list of generators: run r's uniforms come from generator r alone), so a run samples the
    same responses alone or inside a sweep.
    """
    batch, length = prompts.shape[-2], previous.shape[-4]
    shape = (batch, num_trials, length)
    options = dict(device=embedding.device, dtype=torch.float64)
    if isinstance(generator, Sequence):
        if len(generator) != embedding.shape[0]:
            raise ValueError(f"got {len(generator)} generators for {embedding.shape[0]} runs")
        uniforms = torch.stack([torch.rand(shape, generator=g, **options) for g in generator])
    else:
        uniforms = torch.rand(*embedding.shape[:-2], *shape, generator=generator, **options)

    def choose(q: int, logits: Tensor) -> Tensor:
        # cdf / total <= u as cdf <= u * total: the softmax without its division (torch's softmax over a
        # last axis of V + 1 runs as many short loops, several times slower than these few ops)
        logits = logits.detach().double()
        cdf = (logits - logits.amax(dim=-1, keepdim=True)).exp_().cumsum(dim=-1)
        below = (cdf <= uniforms[..., q].unsqueeze(-1) * cdf[..., -1:]).sum(dim=-1)
        return below.clamp(max=logits.shape[-1] - 1)

    with torch.no_grad():
        return generate(embedding, encode, decode, previous, prompts, choose, num_trials)


def greedy(embedding, encode, decode, previous, prompts: Tensor) -> Tensor:
    """The argmax response of every prompt, chosen position by position: int[... batch pos]."""
    with torch.no_grad():
        return generate(embedding, encode, decode, previous, prompts,
                        lambda q, logits: logits.argmax(dim=-1), 1).squeeze(-2)
