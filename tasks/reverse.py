"""Reversal with a sparse reward: respond with the prompt backwards, and only a fully correct answer scores.

For a prompt x and a response y of the same length n, with t = reversed(x) (t_q = x_{n+1-q}):

    exact-match   R = [y == t]                   max 1   (the default: sparse)
    distance      R = sum_q [y_q == t_q]         max n   (dense, for contrast)

What it teaches that sorting does not: under the sparse default a group scores all zeros unless one of its G samples
is exactly t, and a group of equal rewards carries no gradient with a group baseline (centered, normalized, loo give
exact zeros). With p = pi(t | x), a group carries signal with probability 1 - (1 - p)^G - p^G, so at the lecture's
start most epochs teach nothing on most prompts (`signal_probability`; tests/tasks/test_new_tasks.py checks it
against enumeration). Sorting's lecture reward (inclusion-ordering) gives partial credit to almost every sample.
Every target token is a copy of one prompt token, so reversal is a map the factorised policy's per-position decode
can represent, where sorting needs comparisons between prompt tokens.

Variable-length responses (`tasks.windows`: w the first n content tokens, e the extra ones):

    exact-match   R = [c == t]  (exactly n content tokens, then EOS)
    distance      R = sum_q [w_q == t_q] - e

reversed(x) reaches every reward's maximum (for exact-match only it), so it is the target.
"""

from __future__ import annotations

from torch import Tensor

from tasks import Task, reward_registry
from tasks.prompts import checked_prompts
from tasks.windows import content_window, window_reference

REWARD_NAMES = ("exact-match", "distance")
"""`REWARDS`' names in registration order, a literal: `lab --help` reads it without importing this file."""
DEFAULT_REWARD = "exact-match"
VOCAB_SIZE = 5
PROMPTS = [[1, 0, 2], [3, 2, 4], [1, 2, 3]]
"""The lecture's prompts, reversed instead of sorted (`--prompts lecture`)."""
NAME = __name__.rpartition(".")[2]

REWARDS, reward = reward_registry()
VARIABLE_LENGTH, variable_length = reward_registry()


def targets(prompts: Tensor) -> Tensor:
    """reversed(x): int[... pos] -> int[... pos]."""
    return prompts.flip(-1)


def _matches(prompts: Tensor, responses: Tensor) -> Tensor:
    """bool[... batch trial pos]: y_q == t_q, responses int[... batch trial pos] against prompts int[batch pos]."""
    if prompts.shape[-1] != responses.shape[-1]:
        raise ValueError(f"prompt length {prompts.shape[-1]} != response length {responses.shape[-1]}")
    return responses == targets(prompts).unsqueeze(-2)


@reward("exact-match")
def exact_match_reward(prompts: Tensor, responses: Tensor) -> Tensor:
    """1 where the response is reversed(prompt), else 0: float[... batch trial]."""
    return _matches(prompts, responses).all(dim=-1).float()


@reward("distance")
def distance_reward(prompts: Tensor, responses: Tensor) -> Tensor:
    """Positions where the response equals reversed(prompt): float[... batch trial]."""
    return _matches(prompts, responses).sum(dim=-1).float()


@variable_length("exact-match")
def exact_match_reward_varlen(prompts: Tensor, responses: Tensor, eos: int) -> Tensor:
    window, extra = content_window(prompts, responses, eos)
    return exact_match_reward(prompts, window) * (extra == 0).float()


@variable_length("distance")
def distance_reward_varlen(prompts: Tensor, responses: Tensor, eos: int) -> Tensor:
    window, extra = content_window(prompts, responses, eos)
    return distance_reward(prompts, window) - extra


def exact_match_reference(prompt: list[int], response: list[int]) -> float:
    return float(list(response) == prompt[::-1])


def distance_reference(prompt: list[int], response: list[int]) -> float:
    return float(sum(y == t for y, t in zip(response, prompt[::-1])))


def exact_match_varlen_reference(prompt: list[int], response: list[int], eos: int) -> float:
    content = response[:response.index(eos)] if eos in response else response
    return float(list(content) == prompt[::-1])


def distance_varlen_reference(prompt: list[int], response: list[int], eos: int) -> float:
    window, extra = window_reference(prompt, response, eos)
    return float(sum(y == t for y, t in zip(window, prompt[::-1])) - extra)


REFERENCES = {"exact-match": exact_match_reference, "distance": distance_reference}
VARIABLE_LENGTH_REFERENCES = {"exact-match": exact_match_varlen_reference, "distance": distance_varlen_reference}


def signal_probability(p: Tensor, group_size: int) -> Tensor:
    """P(a group of G samples has unequal 0/1 rewards) = 1 - (1 - p)^G - p^G, for success probabilities p float[...].

    Only such a group moves a group-baseline policy (its deltas are not all zero)."""
    return 1 - (1 - p) ** group_size - p ** group_size


def make_task(
    prompts: Tensor | list[list[int]] | None = None,
    vocab_size: int = VOCAB_SIZE,
    eval_prompts: Tensor | list[list[int]] | None = None,
) -> Task:
    """The reversal task; the lecture's prompts by default."""
    prompts, eval_prompts = checked_prompts(PROMPTS if prompts is None else prompts, vocab_size, eval_prompts)
    return Task(name=NAME, prompts=prompts, vocab_size=vocab_size, response_length=prompts.shape[1],
                rewards=REWARDS, targets=targets, eval_prompts=eval_prompts, variable_length_rewards=VARIABLE_LENGTH,
                default_reward=DEFAULT_REWARD, references=REFERENCES,
                variable_length_references=VARIABLE_LENGTH_REFERENCES, solved="reversed")

