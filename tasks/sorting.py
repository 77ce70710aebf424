"""The lecture's sorting task: respond with the prompt's tokens in non-decreasing order.

For a prompt x and a response y of the same length n, with s = sorted(x):

    distance            R = sum_q [y_q == s_q]                                      max n
    inclusion-ordering  R = sum_j [x_j in y] + sum_q [y_q <= y_{q+1}]               max 2n - 1
    blended             R = distance + 1/2 * sum_q [y_q <= y_{q+1}]                 max n + (n-1)/2
    exact-match         R = [y == s]                                                max 1

Inclusion counts over the prompt's tokens, so a duplicated prompt token counts
again. `sorted(x)` reaches every reward's maximum, so it serves as the target
both for the optimum and for exact accuracy (for inclusion-ordering the optimum
need not be unique when the prompt has duplicates).

Variable-length responses (the autoregressive policy, `lab.policies.autoregressive`) end at
their first EOS token (id = vocab size; what follows is padding); a response that reaches the
length cap without EOS is truncated and scored on all its tokens. With c the content tokens
before EOS, w = c_1..c_n its first n (a position a short response lacks counts as wrong: it
matches nothing, includes nothing and orders nothing) and e = max(0, |c| - n) its extra tokens:

    distance            R = sum_q [w_q == s_q]                         - e        max n
    inclusion-ordering  R = sum_j [x_j in w] + sum_q [w_q <= w_{q+1}]  - e        max 2n - 1
    blended             R = distance + 1/2 * sum_q [w_q <= w_{q+1}]               max n + (n-1)/2
    exact-match         R = [c == s]   (exactly n content tokens, sorted(x))      max 1

(the ordering sum runs over pairs of w with both tokens present). So length itself earns
nothing: at most n - 1 pairs count, a missing token is a wrong one and each extra token costs 1
like a wrong one. `exact-match` gives no partial credit (Dr. GRPO's 0/1 correctness reward): 1 for
sorted(x) followed by EOS (or truncated right after it at a cap of n), 0 for every other length. The maximum is the fixed-length one, reached by sorted(x) followed by EOS
(for distance only by it), and a response of exactly n content tokens scores as at fixed length.

Each reward has a plain-Python reference on lists; the tests check that the
vectorized and the reference definitions always agree.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tasks import Task, reward_registry
from tasks.windows import MISSING, content_window, window_reference
from tasks.prompts import checked_prompts, task_from_spec  # noqa: F401  (task_from_spec: for lesson 4's import)

REWARD_NAMES = ("distance", "inclusion-ordering", "blended", "exact-match")
"""`REWARDS`' names in registration order, a literal: `lab --help` reads it without importing this file."""
DEFAULT_REWARD = "inclusion-ordering"
"""The lecture's reward: what a run trains against without `--reward`."""
VOCAB_SIZE = 5
"""The lecture's vocabulary: tokens 0..4."""
LECTURE_VOCAB_SIZE = VOCAB_SIZE

LECTURE_PROMPTS = [[1, 0, 2], [3, 2, 4], [1, 2, 3]]
NAME = __name__.rpartition(".")[2]
"""The task's name, its file's (a copy under another name is another task), as a run's config.json records it."""

BLEND_ORDER_WEIGHT = 0.5
"""Weight of the ordering term in the blended reward (the lecture notes' pseudocode)."""

REWARDS, reward = reward_registry()


def _order_count(responses: Tensor) -> Tensor:
    """Adjacent non-decreasing pairs: int[... pos] -> float[...]."""
    return (responses[..., :-1] <= responses[..., 1:]).sum(dim=-1).float()


def _broadcast_prompts(prompts: Tensor, responses: Tensor) -> Tensor:
    """int[batch pos] -> int[batch 1 pos], ready to meet int[... batch trial pos]."""
    if prompts.shape[-1] != responses.shape[-1]:
        raise ValueError(f"prompt length {prompts.shape[-1]} != response length {responses.shape[-1]}")
    return prompts.unsqueeze(-2)


@reward("distance")
def distance_reward(prompts: Tensor, responses: Tensor) -> Tensor:
    """Positions where the response equals sorted(prompt): float[... batch trial]."""
    targets = _broadcast_prompts(prompts.sort(dim=-1).values, responses)
    return (responses == targets).sum(dim=-1).float()


@reward("inclusion-ordering")
def inclusion_ordering_reward(prompts: Tensor, responses: Tensor) -> Tensor:
    """Prompt tokens present in the response plus ordered adjacent pairs: float[... batch trial]."""
    x = _broadcast_prompts(prompts, responses)  # int[batch 1 pos]
    # present[..., j] = prompt token j occurs anywhere in the response
    present = (x.unsqueeze(-1) == responses.unsqueeze(-2)).any(dim=-1)  # bool[... batch trial pos]
    return present.sum(dim=-1).float() + _order_count(responses)


@reward("blended")
def blended_reward(prompts: Tensor, responses: Tensor) -> Tensor:
    """Matches with sorted(prompt) plus half the ordered adjacent pairs: float[... batch trial]."""
    return distance_reward(prompts, responses) + BLEND_ORDER_WEIGHT * _order_count(responses)


@reward("exact-match")
def exact_match_reward(prompts: Tensor, responses: Tensor) -> Tensor:
    """1 where the response is sorted(prompt), else 0: float[... batch trial]."""
    targets = _broadcast_prompts(prompts.sort(dim=-1).values, responses)
    return (responses == targets).all(dim=-1).float()


# Plain-Python definitions on lists: the specification the tensor code is tested against.

def distance_reference(prompt: list[int], response: list[int]) -> float:
    return float(sum(y == s for y, s in zip(response, sorted(prompt))))


def inclusion_ordering_reference(prompt: list[int], response: list[int]) -> float:
    inclusion = sum(1 for token in prompt if token in response)
    ordering = sum(1 for a, b in zip(response, response[1:]) if a <= b)
    return float(inclusion + ordering)


def blended_reference(prompt: list[int], response: list[int]) -> float:
    ordering = sum(1 for a, b in zip(response, response[1:]) if a <= b)
    return distance_reference(prompt, response) + BLEND_ORDER_WEIGHT * ordering


def exact_match_reference(prompt: list[int], response: list[int]) -> float:
    return float(list(response) == sorted(prompt))


REFERENCES = {
    "distance": distance_reference,
    "inclusion-ordering": inclusion_ordering_reference,
    "blended": blended_reference,
    "exact-match": exact_match_reference,
}


# Variable-length versions: responses int[... batch trial pos] over 0..V with EOS = V (tasks.windows).

VARIABLE_LENGTH, variable_length = reward_registry()


def _present_order_count(window: Tensor) -> Tensor:
    """Ordered adjacent pairs with both tokens present (MISSING only trails): float[...]."""
    return ((window[..., :-1] <= window[..., 1:]) & (window[..., 1:] != MISSING)).sum(dim=-1).float()


@variable_length("distance")
def distance_reward_varlen(prompts: Tensor, responses: Tensor, eos: int) -> Tensor:
    window, extra = content_window(prompts, responses, eos)
    return distance_reward(prompts, window) - extra


@variable_length("inclusion-ordering")
def inclusion_ordering_reward_varlen(prompts: Tensor, responses: Tensor, eos: int) -> Tensor:
    window, extra = content_window(prompts, responses, eos)
    present = (prompts.unsqueeze(-2).unsqueeze(-1) == window.unsqueeze(-2)).any(dim=-1)  # prompt token j in w
    return present.sum(dim=-1).float() + _present_order_count(window) - extra


@variable_length("blended")
def blended_reward_varlen(prompts: Tensor, responses: Tensor, eos: int) -> Tensor:
    window, _ = content_window(prompts, responses, eos)
    return distance_reward_varlen(prompts, responses, eos) + BLEND_ORDER_WEIGHT * _present_order_count(window)


@variable_length("exact-match")
def exact_match_reward_varlen(prompts: Tensor, responses: Tensor, eos: int) -> Tensor:
    window, extra = content_window(prompts, responses, eos)
    return exact_match_reward(prompts, window) * (extra == 0).float()


def variable_length_reward(name: str, eos: int):
    """The registered reward `name` for responses that end with token `eos`: a vectorized RewardFn."""
    if name not in VARIABLE_LENGTH:
        raise ValueError(f"unknown reward {name!r}; choose one of: {', '.join(VARIABLE_LENGTH)}")
    fn = VARIABLE_LENGTH[name]
    return lambda prompts, responses: fn(prompts, responses, eos)


def distance_varlen_reference(prompt: list[int], response: list[int], eos: int) -> float:
    window, extra = window_reference(prompt, response, eos)
    return float(sum(y == s for y, s in zip(window, sorted(prompt))) - extra)


def inclusion_ordering_varlen_reference(prompt: list[int], response: list[int], eos: int) -> float:
    window, extra = window_reference(prompt, response, eos)
    inclusion = sum(1 for token in prompt if token in window)
    ordering = sum(1 for a, b in zip(window, window[1:]) if a <= b)
    return float(inclusion + ordering - extra)


def blended_varlen_reference(prompt: list[int], response: list[int], eos: int) -> float:
    window, _ = window_reference(prompt, response, eos)
    ordering = sum(1 for a, b in zip(window, window[1:]) if a <= b)
    return distance_varlen_reference(prompt, response, eos) + BLEND_ORDER_WEIGHT * ordering


def exact_match_varlen_reference(prompt: list[int], response: list[int], eos: int) -> float:
    content = response[:response.index(eos)] if eos in response else response
    return float(list(content) == sorted(prompt))


VARIABLE_LENGTH_REFERENCES = {
    "distance": distance_varlen_reference,
    "inclusion-ordering": inclusion_ordering_varlen_reference,
    "blended": blended_varlen_reference,
    "exact-match": exact_match_varlen_reference,
}


def lecture_prompts() -> Tensor:
    """The lecture's three prompts, int[3 3], over the vocabulary 0..4."""
    return torch.tensor(LECTURE_PROMPTS)


def make_task(
    prompts: Tensor | list[list[int]] | None = None,
    vocab_size: int = VOCAB_SIZE,
    eval_prompts: Tensor | list[list[int]] | None = None,
) -> Task:
    """The sorting task; the lecture's prompts by default."""
    prompts, eval_prompts = checked_prompts(lecture_prompts() if prompts is None else prompts, vocab_size,
                                            eval_prompts)
    return Task(
        name=NAME,
        prompts=prompts,
        vocab_size=vocab_size,
        response_length=prompts.shape[1],
        rewards=REWARDS,
        targets=lambda p: p.sort(dim=-1).values,
        eval_prompts=eval_prompts,
        variable_length_rewards=VARIABLE_LENGTH,
        default_reward=DEFAULT_REWARD,
        references=REFERENCES,
        variable_length_references=VARIABLE_LENGTH_REFERENCES,
        solved="sorted",
    )
