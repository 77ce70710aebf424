"""A learned critic V_psi of the policy's family: PPO's value network, with parameters of its own.

    factorised       h    = sum_p E'[x_p] @ A'_p                      v(x)     = h . w + b    (every position)
    autoregressive   z_q  = h @ B'_q + sum_{j<q} E'[y_j] @ C'_qj      v(x, y_<q) = z_q . w + b   (each prefix)

E', A', B', C' are the critic's own copies of the policy's embedding, encode, decode and
previous-token matrices (`lab.policies.factorized`, `lab.policies.ar_model`), drawn the same way from
the critic's own generator; w float[dim] and b float[] read the state out to one value and start at
0, so every critic starts at V = 0 (the first advantages are the raw rewards). The factorised policy
chooses every token from the prompt alone, so its one state is the prompt and the critic gives the
same value at every position; the autoregressive policy's state before token q is the prefix, the
same z_q its logits are read from. Values on padding after EOS are computed but mean nothing (the
GAE scan and the value loss mask them: `lab.core.gae`).

Every parameter may carry a leading `run` axis (`Critic` always does: R critics train as one
computation in a sweep, each with its own Adam state in `lab.training`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from lab.policies.ar_model import causal_mask, lookup, prompt_state
from lab.policies.factorized import embed
from lab.policies.interface import PolicyKind


def _encoder(embedding: Tensor, encode: Tensor, prompts: Tensor) -> Tensor:
    """h = sum_p E[x_p] @ A_p: float[... batch dim]."""
    batch, prompt_length = prompts.shape[-2:]
    x = embed(embedding, prompts)  # float[... (batch pos) dim]
    return x.reshape(*x.shape[:-2], batch, prompt_length * embedding.shape[-1]) @ encode.flatten(-3, -2)


def factorized_values(params: dict[str, Tensor], prompts: Tensor, responses: Tensor) -> Tensor:
    """(params, prompts int[... batch pos], responses int[... batch trial pos]) -> float[... batch trial pos]:
    v(x) at every position of every trial."""
    h = _encoder(params["embedding"], params["encode"], prompts)  # float[... batch dim]
    value = (h * params["readout"].unsqueeze(-2)).sum(-1) + params["bias"][..., None]  # float[... batch]
    return value[..., None, None].expand(*value.shape, *responses.shape[-2:])


def autoregressive_values(params: dict[str, Tensor], prompts: Tensor, responses: Tensor) -> Tensor:
    """(params, prompts int[... batch pos], responses int[... batch trial pos]) -> float[... batch trial pos]:
    v(x, y_<q) at every position q (the response's own earlier tokens)."""
    embedding, previous = params["embedding"], params["previous"]
    causal = previous * causal_mask(previous.shape[-4], previous.device).to(previous)
    emitted = lookup(embedding, responses)  # float[... batch trial j dim]
    # "... batch trial j d, ... q j d e -> ... batch trial q e": the prefix's part of the state z_q
    z = prompt_state(embedding, params["encode"], params["decode"], prompts).unsqueeze(-3) + torch.einsum(
        "...btjd,...qjde->...btqe", emitted, causal)
    return torch.einsum("...btqe,...e->...btq", z, params["readout"]) + params["bias"][..., None, None, None]


def _randn(generator: torch.Generator | None, *shape: int, dtype: torch.dtype | None = None) -> Tensor:
    return torch.randn(*shape, generator=generator, device=None if generator is None else generator.device,
                       dtype=dtype)


def init_factorized(vocab_size: int, prompt_length: int, max_length: int, dim: int,
                    generator: torch.Generator | None = None, dtype: torch.dtype | None = None) -> dict[str, Tensor]:
    """E' ~ N(0, 1), A'_p ~ N(0, 1/dim) as the policy's; w = 0, b = 0."""
    embedding = _randn(generator, vocab_size, dim, dtype=dtype)
    encode = _randn(generator, prompt_length, dim, dim, dtype=dtype) / math.sqrt(dim)
    return {"embedding": embedding, "encode": encode,
            "readout": embedding.new_zeros(dim), "bias": embedding.new_zeros(())}


def init_autoregressive(vocab_size: int, prompt_length: int, max_length: int, dim: int,
                        generator: torch.Generator | None = None, dtype: torch.dtype | None = None) -> dict[str, Tensor]:
    """E' ~ N(0, 1) over the V content tokens and EOS, A', B', C' ~ N(0, 1/dim) (C'_qj = 0 for j >= q); w = 0, b = 0."""
    scale = 1 / math.sqrt(dim)
    embedding = _randn(generator, vocab_size + 1, dim, dtype=dtype)
    return {"embedding": embedding,
            "encode": _randn(generator, prompt_length, dim, dim, dtype=dtype) * scale,
            "decode": _randn(generator, max_length, dim, dim, dtype=dtype) * scale,
            "previous": _randn(generator, max_length, max_length, dim, dim, dtype=dtype) * scale
            * causal_mask(max_length, embedding.device),
            "readout": embedding.new_zeros(dim), "bias": embedding.new_zeros(())}


@dataclass(frozen=True)
class CriticOps:
    """One policy family's critic: its values and its initialisation."""

    values: Callable[[dict[str, Tensor], Tensor, Tensor], Tensor]
    """(params, prompts int[... batch pos], responses int[... batch trial pos]) -> float[... batch trial pos]"""
    init: Callable[..., dict[str, Tensor]]
    """(vocab_size, prompt_length, max_length, dim, generator) -> one critic's parameters"""


CRITICS: dict[PolicyKind, CriticOps] = {
    PolicyKind.factorized: CriticOps(factorized_values, init_factorized),
    PolicyKind.autoregressive: CriticOps(autoregressive_values, init_autoregressive),
}
"""The one table from the policy's kind to its critic."""


def parameter_count(params: dict[str, Tensor], runs: bool = False) -> int:
    """The free parameters of one policy or critic (per run with `runs`): every entry, except the
    previous-token matrices C_qj with j >= q, which are held at 0."""
    total = 0
    for name, value in params.items():
        shape = value.shape[1:] if runs else value.shape
        count = math.prod(shape)
        if name == "previous":  # [q j dim dim]: only j < q is free
            count = count * (shape[0] - 1) // (2 * shape[0])
        total += count
    return total


class Critic(nn.Module):
    """R critics of one kind with a leading run axis on every parameter; run r drawn from `generators[r]`.

    `forward(prompts int[batch pos] or int[run batch pos], responses int[run batch trial pos])`
    -> float[run batch trial pos], the value of the state before each position.
    """

    def __init__(self, kind: PolicyKind | str, vocab_size: int, prompt_length: int, max_length: int, dim: int,
                 generators: list[torch.Generator], dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.kind = PolicyKind(kind)
        per_run = [CRITICS[self.kind].init(vocab_size, prompt_length, max_length, dim, g, dtype) for g in generators]
        for name in per_run[0]:
            setattr(self, name, nn.Parameter(torch.stack([p[name] for p in per_run])))

    @property
    def num_runs(self) -> int:
        return self.embedding.shape[0]

    @property
    def parameter_count(self) -> int:
        """Free parameters of one run's critic (`parameter_count`)."""
        return parameter_count(dict(self.named_parameters()), runs=True)

    def forward(self, prompts: Tensor, responses: Tensor) -> Tensor:
        return CRITICS[self.kind].values(dict(self.named_parameters()), prompts, responses)
