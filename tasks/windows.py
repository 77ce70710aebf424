"""The content window of a variable-length response: what a task's rewards for the autoregressive policy score.

A response over 0..V ends at its first EOS (id V; what follows is padding), or runs to the length cap. With c its
content tokens and n the prompt's length:

    w = c_1..c_n, MISSING where c is shorter        e = max(0, |c| - n)  (its extra tokens)

so a task scores w as a fixed-length response (a missing position matches nothing) and charges each extra token.
"""

from __future__ import annotations

import torch
from torch import Tensor

MISSING = -1
"""Stands for a position a short response lacks: it equals no token and orders with none."""


def content_window(prompts: Tensor, responses: Tensor, eos: int) -> tuple[Tensor, Tensor]:
    """The first n content tokens (MISSING where absent) and the number of extra ones.

    prompts int[batch n], responses int[... batch trial pos] -> int[... batch trial n], float[... batch trial].
    """
    n = prompts.shape[-1]
    content_length = ((responses == eos).long().cumsum(dim=-1) == 0).sum(dim=-1)  # tokens before EOS
    if responses.shape[-1] < n:  # a cap below n: the later positions are missing whatever was sampled
        pad = responses.new_full((*responses.shape[:-1], n - responses.shape[-1]), MISSING)
        responses = torch.cat([responses, pad], dim=-1)
    present = torch.arange(n, device=responses.device) < content_length.unsqueeze(-1)
    window = torch.where(present, responses[..., :n], MISSING)
    return window, (content_length - n).clamp(min=0).float()


def window_reference(prompt: list[int], response: list[int], eos: int) -> tuple[list[int], int]:
    """The plain-Python content window: (c_1..c_n, e) of a list response."""
    content = response[:response.index(eos)] if eos in response else response
    return content[:len(prompt)], max(0, len(content) - len(prompt))
