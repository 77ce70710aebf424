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

import json

import torch
from torch import Tensor

from tasks import Task, reward_registry
from tasks.sorting_choices import LECTURE_VOCAB_SIZE

LECTURE_PROMPTS = [[1, 0, 2], [3, 2, 4], [1, 2, 3]]
TASK_NAME = "sorting"
"""The task's name, as a run's config.json records it."""

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


# Variable-length versions: responses int[... batch trial pos] over 0..V with EOS = V.

MISSING = -1
"""Stands for a position a short response lacks: it equals no token and orders with none."""

VARIABLE_LENGTH, variable_length = reward_registry()


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


def _window_reference(prompt: list[int], response: list[int], eos: int) -> tuple[list[int], int]:
    content = response[:response.index(eos)] if eos in response else response
    return content[:len(prompt)], max(0, len(content) - len(prompt))


def distance_varlen_reference(prompt: list[int], response: list[int], eos: int) -> float:
    window, extra = _window_reference(prompt, response, eos)
    return float(sum(y == s for y, s in zip(window, sorted(prompt))) - extra)


def inclusion_ordering_varlen_reference(prompt: list[int], response: list[int], eos: int) -> float:
    window, extra = _window_reference(prompt, response, eos)
    inclusion = sum(1 for token in prompt if token in window)
    ordering = sum(1 for a, b in zip(window, window[1:]) if a <= b)
    return float(inclusion + ordering - extra)


def blended_varlen_reference(prompt: list[int], response: list[int], eos: int) -> float:
    window, _ = _window_reference(prompt, response, eos)
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


def space_at_most(vocab_size: int, length: int, cap: int) -> int:
    """min(vocab_size ** length, cap + 1): the number of prompts, multiplied out only until it passes `cap`
    (a `--prompt-length` of 11 digits must not make Python compute a power of 11 digits)."""
    space = 1
    for _ in range(length):
        space *= vocab_size
        if space > cap or vocab_size <= 1:
            return min(space, cap + 1)
    return space


def random_prompts(
    count: int,
    length: int,
    vocab_size: int,
    generator: torch.Generator,
    exclude: Tensor | None = None,
    what: str = "prompt count",
) -> Tensor:
    """`count` distinct prompts, int[count length], none of them a row of `exclude`.

    Drawn uniformly (with repeated tokens allowed) by rejection; errors (`what` must be at most ...) if the
    space has fewer than `count` prompts left.
    """
    taken = set() if exclude is None else {tuple(row) for row in exclude.tolist()}
    space = space_at_most(vocab_size, length, count + len(taken))
    if count > space - len(taken):
        raise ValueError(f"{what} must be at most {space - len(taken)}, the distinct prompts of length {length} "
                         f"over vocab {vocab_size} left to draw, got {count}")
    chosen: list[list[int]] = []
    while len(chosen) < count:
        for row in torch.randint(vocab_size, (count, length), generator=generator).tolist():
            if tuple(row) not in taken and len(chosen) < count:
                taken.add(tuple(row))
                chosen.append(row)
    return torch.tensor(chosen, dtype=torch.long)


def validate_prompts(prompts: Tensor, vocab_size: int) -> None:
    if prompts.dim() != 2 or prompts.shape[0] == 0 or prompts.shape[1] == 0:
        raise ValueError("prompts must be a non-empty list of equal-length lists of tokens, "
                         f"got shape {tuple(prompts.shape)}")
    low, high = int(prompts.min()), int(prompts.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"prompt tokens must lie in 0..{vocab_size - 1} (vocab size {vocab_size}), "
                         f"got tokens from {low} to {high}")


def make_task(
    prompts: Tensor | list[list[int]] | None = None,
    vocab_size: int = LECTURE_VOCAB_SIZE,
    eval_prompts: Tensor | list[list[int]] | None = None,
) -> Task:
    """The sorting task; the lecture's prompts by default."""
    prompts = lecture_prompts() if prompts is None else torch.as_tensor(prompts, dtype=torch.long)
    validate_prompts(prompts, vocab_size)
    if eval_prompts is not None:
        eval_prompts = torch.as_tensor(eval_prompts, dtype=torch.long)
        validate_prompts(eval_prompts, vocab_size)
        if eval_prompts.shape[1] != prompts.shape[1]:
            raise ValueError(f"held-out prompts have length {eval_prompts.shape[1]}, "
                             f"training prompts {prompts.shape[1]}")
    return Task(
        name=TASK_NAME,
        prompts=prompts,
        vocab_size=vocab_size,
        response_length=prompts.shape[1],
        rewards=REWARDS,
        targets=lambda p: p.sort(dim=-1).values,
        eval_prompts=eval_prompts,
    )


PROMPT_SOURCES = ("lecture", "random")


def task_from_spec(
    spec: str = "lecture",
    vocab_size: int = LECTURE_VOCAB_SIZE,
    count: int = 3,
    length: int = 3,
    heldout: int = 0,
    prompt_seed: int = 0,
) -> Task:
    """The task a command line describes.

    `spec` is `lecture` (the lecture's prompts), `random` (`count` distinct random
    prompts of `length` tokens) or a JSON list of lists such as `[[3,1,0,2],[2,2,0,1]]`.
    `heldout` random prompts of the same length, disjoint from the training ones,
    are drawn from `prompt_seed` for evaluation.
    """
    for name, value in (("vocab size", vocab_size), ("prompt count", count), ("prompt length", length)):
        if value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    if heldout < 0:
        raise ValueError(f"the number of held-out prompts must be >= 0, got {heldout}")
    if not -2**63 <= prompt_seed < 2**64:  # what torch.Generator.manual_seed accepts
        raise ValueError(f"the prompt seed must be an integer from -2**63 to 2**64 - 1, got {prompt_seed}")
    generator = torch.Generator().manual_seed(prompt_seed)
    if spec == "lecture":
        prompts = lecture_prompts()
    elif spec == "random":
        prompts = random_prompts(count, length, vocab_size, generator)
    else:
        prompts = _parse_prompt_list(spec, vocab_size)
    validate_prompts(prompts, vocab_size)  # before the held-out draw relies on them (make_task checks again)
    eval_prompts = (random_prompts(heldout, prompts.shape[1], vocab_size, generator, exclude=prompts,
                                   what="the number of held-out prompts") if heldout else None)
    return make_task(prompts, vocab_size, eval_prompts)


def _parse_prompt_list(spec: str, vocab_size: int = LECTURE_VOCAB_SIZE) -> Tensor:
    allowed = "use 'lecture', 'random', or a JSON list of equal-length token lists like [[3,1,0,2],[2,2,0,1]]"
    shown = spec if len(spec) <= 60 else spec[:57] + "..."
    try:
        rows = json.loads(spec)
    except (json.JSONDecodeError, RecursionError):  # deep nesting: the parser's stack, not a traceback
        raise ValueError(f"cannot read prompts {shown!r}: {allowed}") from None
    spec = shown
    if (not isinstance(rows, list) or not rows
            or not all(isinstance(r, list) and r and all(isinstance(t, int) and not isinstance(t, bool)
                                                       for t in r) for r in rows)):
        raise ValueError(f"prompts {spec!r} are not a list of non-empty integer lists: {allowed}")
    if len({len(r) for r in rows}) > 1:
        raise ValueError(f"prompts {spec!r} have different lengths {sorted({len(r) for r in rows})}; "
                         "all prompts of a task share one length")
    low, high = min(min(r) for r in rows), max(max(r) for r in rows)
    if low < 0 or high >= vocab_size:  # before torch.tensor, which overflows past int64 with its own words
        raise ValueError(f"prompt tokens must lie in 0..{vocab_size - 1} (vocab size {vocab_size}), "
                         f"got tokens from {low} to {high}")
    return torch.tensor(rows, dtype=torch.long)
