"""Rearrangement, whose difficulty differs by prompt: respond with the prompt's tokens in any order.

For a prompt x and a response y of the same length n, with c_x(v) the count of token v in x:

    rearranged   R = [c_y == c_x]  (y is a permutation of x)          max 1   (the default)
    overlap      R = sum_v min(c_x(v), c_y(v))                          max n   (the multisets' overlap)

What it teaches that sorting does not: the number of optimal responses differs by prompt. A prompt of n distinct
tokens has n! of them, one token n times has one: under the uniform policy a sample is optimal with probability
n! / (prod_v c_x(v)!) / V^n (`uniform_success`), 6/125 for [1, 0, 2] and 1/125 for [0, 0, 0], where sorting's
exact-match is 1/V^n on every prompt. So prompts differ in difficulty from the first epoch, which is what group-std
normalisation reweights (Dr. GRPO, arXiv:2503.20783, on its question-level difficulty bias), and the optimum is a
set, not a point: a policy may be optimal and still random (the factorised policy cannot put mass on exactly the
permutations of a prompt with distinct tokens, so its optimum puts it on one of them).

Variable-length responses (`tasks.windows`: w the first n content tokens, MISSING counting as no token, e the extra):

    rearranged   R = [c_w == c_x and e = 0]   (exactly n content tokens, then EOS)
    overlap      R = sum_v min(c_x(v), c_w(v)) - e

The prompt itself is a permutation of itself, optimal under both rewards, so it is the target.
"""

from __future__ import annotations

import math
from collections import Counter

import torch
from torch import Tensor

from tasks import Task, reward_registry
from tasks.prompts import checked_prompts
from tasks.windows import content_window, window_reference

REWARD_NAMES = ("rearranged", "overlap")
"""`REWARDS`' names in registration order, a literal: `lab --help` reads it without importing this file."""
DEFAULT_REWARD = "rearranged"
VOCAB_SIZE = 5
PROMPTS = [[1, 0, 2], [3, 3, 4], [2, 2, 2]]
"""Three prompts of 6, 3 and 1 optimal responses (`--prompts lecture`)."""
NAME = __name__.rpartition(".")[2]

REWARDS, reward = reward_registry()
VARIABLE_LENGTH, variable_length = reward_registry()


def targets(prompts: Tensor) -> Tensor:
    """The prompt itself, one of its permutations: int[... pos] -> int[... pos]."""
    return prompts


def _overlap(prompts: Tensor, responses: Tensor) -> Tensor:
    """sum_v min(c_x(v), c_y(v)): float[... batch trial], from prompts int[batch n] and responses int[... batch trial
    n] (a negative token, `tasks.windows.MISSING`, counts as none)."""
    if prompts.shape[-1] != responses.shape[-1]:
        raise ValueError(f"prompt length {prompts.shape[-1]} != response length {responses.shape[-1]}")
    tokens = torch.arange(int(max(prompts.max(), responses.max())) + 1, device=prompts.device)
    prompt_counts = (prompts.unsqueeze(-1) == tokens).sum(dim=-2).unsqueeze(-2)  # int[batch 1 vocab]
    response_counts = (responses.unsqueeze(-1) == tokens).sum(dim=-2)  # int[... batch trial vocab]
    return torch.minimum(prompt_counts, response_counts).sum(dim=-1).float()


@reward("rearranged")
def rearranged_reward(prompts: Tensor, responses: Tensor) -> Tensor:
    """1 where the response is a permutation of the prompt, else 0: float[... batch trial]."""
    return (_overlap(prompts, responses) == prompts.shape[-1]).float()


@reward("overlap")
def overlap_reward(prompts: Tensor, responses: Tensor) -> Tensor:
    """The size of the prompt's and the response's multisets' intersection: float[... batch trial]."""
    return _overlap(prompts, responses)


@variable_length("rearranged")
def rearranged_reward_varlen(prompts: Tensor, responses: Tensor, eos: int) -> Tensor:
    window, extra = content_window(prompts, responses, eos)
    return rearranged_reward(prompts, window) * (extra == 0).float()


@variable_length("overlap")
def overlap_reward_varlen(prompts: Tensor, responses: Tensor, eos: int) -> Tensor:
    window, extra = content_window(prompts, responses, eos)
    return overlap_reward(prompts, window) - extra


def overlap_reference(prompt: list[int], response: list[int]) -> float:
    return float(sum((Counter(prompt) & Counter(response)).values()))


def rearranged_reference(prompt: list[int], response: list[int]) -> float:
    return float(sorted(response) == sorted(prompt))


def overlap_varlen_reference(prompt: list[int], response: list[int], eos: int) -> float:
    window, extra = window_reference(prompt, response, eos)
    return overlap_reference(prompt, window) - extra


def rearranged_varlen_reference(prompt: list[int], response: list[int], eos: int) -> float:
    content = response[:response.index(eos)] if eos in response else response
    return rearranged_reference(prompt, content)


REFERENCES = {"rearranged": rearranged_reference, "overlap": overlap_reference}
VARIABLE_LENGTH_REFERENCES = {"rearranged": rearranged_varlen_reference, "overlap": overlap_varlen_reference}


def uniform_success(prompt: list[int], vocab_size: int) -> float:
    """P(a uniformly random response is a permutation of `prompt`) = n! / prod_v c(v)! / V^n."""
    arrangements = math.factorial(len(prompt)) // math.prod(math.factorial(c) for c in Counter(prompt).values())
    return arrangements / vocab_size ** len(prompt)


def make_task(
    prompts: Tensor | list[list[int]] | None = None,
    vocab_size: int = VOCAB_SIZE,
    eval_prompts: Tensor | list[list[int]] | None = None,
) -> Task:
    """The rearrangement task; three prompts of 6, 3 and 1 arrangements by default."""
    prompts, eval_prompts = checked_prompts(PROMPTS if prompts is None else prompts, vocab_size, eval_prompts)
    return Task(name=NAME, prompts=prompts, vocab_size=vocab_size, response_length=prompts.shape[1],
                rewards=REWARDS, targets=targets, eval_prompts=eval_prompts, variable_length_rewards=VARIABLE_LENGTH,
                default_reward=DEFAULT_REWARD, references=REFERENCES,
                variable_length_references=VARIABLE_LENGTH_REFERENCES, correct="rearranged", solved="rearranged")
