"""An autoregressive policy in the lecture's style, with an end-of-sequence token.

    h          = sum_p  E[x_p] @ A_p                                (the lecture's encoder, unchanged)
    z_q        = h @ B_q  +  sum_{j<q} E[y_j] @ C_qj                (C_qj: previous-token matrix, j < q)
    logits_q   = z_q @ E^T                                          over V + 1 tokens: 0..V-1 and EOS = V
    pi(y | x)  = prod_{q < |y|} softmax(logits_q)[y_q]

The embedding E[(V + 1) dim] is tied as in the lecture, with one extra row for EOS. A response
is int[pos] with pos = max_length: it ends at its first EOS, and every position after that
holds EOS again as padding, which is masked out (`response_mask`): padding has no log-prob,
no loss, no KL and no metric. |y| counts the live tokens, the EOS included. A response that
reaches max_length without EOS is truncated there: it has max_length live tokens, all content,
and the rewards score those content tokens like any other response (`tasks.sorting`).

Initialisation follows the lecture's rules and draws the lecture model's parameters first
(`lab.policies.factorized.init_parameters`), then the EOS row of E ~ N(0, 1) and C_qj ~ N(0, 1/dim); so
with every C = 0 the first V columns of the logits are the lecture model's logits from the same
generator, and conditioned on never choosing EOS the response distribution is the lecture's
(tests/test_autoregressive.py). C_qj for j >= q stays exactly zero (the forward masks it).
Every parameter may carry a leading `run` axis (`AutoregressiveStack`). Decoding (sampling,
greedy) is `lab.policies.ar_decoding`; the training loop's fast log-probs `lab.policies.ar_fused`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from lab.policies.interface import PolicyKind, PolicyOps
from lab.policies.factorized import embed, init_parameters


def causal_mask(length: int, device=None) -> Tensor:
    """float[q j 1 1]: 1 where j < q (position q sees the tokens emitted before it)."""
    return torch.ones(length, length, device=device).tril(-1)[..., None, None]


def init_autoregressive(vocab_size: int, prompt_length: int, max_length: int, dim: int,
                        generator: torch.Generator | None = None, device=None,
                        init_scale: float = 1.0) -> dict[str, Tensor]:
    """One policy's parameters; `vocab_size` counts content tokens (EOS is the extra id vocab_size).

    `init_scale` multiplies the whole embedding, EOS row included, as `lab.policies.factorized.init_parameters`
    does the lecture's (the same draws at every scale).
    """
    device = generator.device if generator is not None else device
    lecture = init_parameters(vocab_size, prompt_length, max_length, dim, generator, device, init_scale=init_scale)
    eos_row = torch.randn(1, dim, generator=generator, device=device) * init_scale  # as nn.Embedding: N(0, 1)
    previous = torch.randn(max_length, max_length, dim, dim, generator=generator, device=device) / math.sqrt(dim)
    return {
        "embedding": torch.cat([lecture["embedding"], eos_row]),  # float[(vocab + 1) dim]
        "encode": lecture["encode"],  # float[pos dim dim]
        "decode": lecture["decode"],  # float[pos dim dim]
        "previous": previous * causal_mask(max_length, device),  # float[q j dim dim]
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


class AutoregressivePolicy(nn.Module):
    """One autoregressive policy. `forward(prompts, responses)` gives teacher-forced logits
    float[batch trial pos vocab+1]; `vocab_size` counts content tokens, `eos` = vocab_size."""

    def __init__(self, vocab_size: int, prompt_length: int, max_length: int, dim: int = 10,
                 generator: torch.Generator | None = None, init_scale: float = 1.0) -> None:
        super().__init__()
        self.vocab_size, self.prompt_length, self.response_length, self.dim = (
            vocab_size, prompt_length, max_length, dim)
        params = init_autoregressive(vocab_size, prompt_length, max_length, dim, generator, init_scale=init_scale)
        for name, value in params.items():
            setattr(self, name, nn.Parameter(value))

    @property
    def eos(self) -> int:
        return self.vocab_size

    @property
    def max_length(self) -> int:
        return self.response_length

    def forward(self, prompts: Tensor, responses: Tensor) -> Tensor:
        return teacher_forced_logits(self.embedding, self.encode, self.decode, self.previous, prompts, responses)


class AutoregressiveStack(AutoregressivePolicy):
    """R independent autoregressive policies with a leading run axis on every parameter.

    Run r is initialised from `generators[r]` (and `init_scales[r]`, default 1) exactly as
    `AutoregressivePolicy(..., generator=generators[r], init_scale=init_scales[r])`.
    `forward(prompts int[batch pos] or int[run batch pos], responses int[run batch trial pos])`.
    """

    def __init__(self, vocab_size: int, prompt_length: int, max_length: int, dim: int,
                 generators: list[torch.Generator], init_scales: list[float] | None = None) -> None:
        nn.Module.__init__(self)
        self.vocab_size, self.prompt_length, self.response_length, self.dim = (
            vocab_size, prompt_length, max_length, dim)
        scales = init_scales or [1.0] * len(generators)
        per_run = [init_autoregressive(vocab_size, prompt_length, max_length, dim, g, init_scale=s)
                   for g, s in zip(generators, scales)]
        stacked = {name: torch.stack([p[name] for p in per_run]) for name in per_run[0]}
        # kept in memory as [run d q e] and [run d j q e]: the fused log-probs' matrices of decode
        # [d (q e)] and of previous [d (j q e)] (`lab.policies.ar_fused`) are then views, and their
        # gradients need no permuted copies (lab.training.optim updates them in that memory order)
        stacked["decode"] = stacked["decode"].transpose(1, 2).contiguous().transpose(1, 2)
        stacked["previous"] = stacked["previous"].permute(0, 3, 2, 1, 4).contiguous().permute(0, 3, 2, 1, 4)
        for name, value in stacked.items():
            setattr(self, name, nn.Parameter(value))

    @property
    def num_runs(self) -> int:
        return self.embedding.shape[0]

    def unstack(self, run: int) -> AutoregressivePolicy:
        """Run `run` as a standalone policy (a copy)."""
        policy = AutoregressivePolicy(self.vocab_size, self.prompt_length, self.response_length, self.dim)
        with torch.no_grad():
            for name, p in self.named_parameters():
                getattr(policy, name).copy_(p[run])
        return policy.to(self.embedding.device)


def _unpack(params: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return params["embedding"], params["encode"], params["decode"], params["previous"]


from lab.policies.ar_decoding import greedy, sample  # noqa: E402  (decoding uses the functions above)

OPS = PolicyOps(
    kind=PolicyKind.autoregressive,
    classes=(AutoregressivePolicy, AutoregressiveStack),
    token_logits=lambda params, prompts, responses: teacher_forced_logits(*_unpack(params), prompts, responses),
    sample=lambda params, prompts, num_trials, generator=None: sample(
        *_unpack(params), prompts, num_trials, generator),
    greedy=lambda params, prompts: greedy(*_unpack(params), prompts),
    eos=lambda policy: policy.vocab_size,
    build=AutoregressiveStack,
    single=AutoregressivePolicy,
)
