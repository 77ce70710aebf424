"""Prompts for any task: the lecture's or a task's own, distinct random ones, or a JSON list, checked.

    task_from_spec(spec, ..., task=NAME) = tasks.NAME.make_task(prompts(spec), vocab_size, held-out prompts)

`spec` is `lecture` (the task's own prompts: for sorting, the lecture's three), `random` (distinct uniform draws by
rejection, from a seeded generator) or a JSON list of equal-length token lists. Held-out prompts are drawn disjoint
from the training ones. Every mistake is a ValueError whose words a command line shows as they are.
"""

from __future__ import annotations

import json

import torch
from torch import Tensor

from tasks import Task
from tasks.catalog import DEFAULT_TASK, load


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


def checked_prompts(prompts, vocab_size: int, eval_prompts=None) -> tuple[Tensor, Tensor | None]:
    """A task's prompts and held-out prompts as int[batch pos] tensors, checked: tokens in 0..vocab_size-1, one
    length (what every task's `make_task` does with what it is given)."""
    prompts = torch.as_tensor(prompts, dtype=torch.long)
    validate_prompts(prompts, vocab_size)
    if eval_prompts is not None:
        eval_prompts = torch.as_tensor(eval_prompts, dtype=torch.long)
        validate_prompts(eval_prompts, vocab_size)
        if eval_prompts.shape[1] != prompts.shape[1]:
            raise ValueError(f"held-out prompts have length {eval_prompts.shape[1]}, "
                             f"training prompts {prompts.shape[1]}")
    return prompts, eval_prompts


def task_from_spec(
    spec: str = "lecture",
    vocab_size: int | None = None,
    count: int = 3,
    length: int = 3,
    heldout: int = 0,
    prompt_seed: int = 0,
    task: str = DEFAULT_TASK,
) -> Task:
    """The task a command line describes: the task file `tasks/<task>.py` on the prompts `spec` names.

    `spec` is `lecture` (the task's own prompts; sorting's are the lecture's), `random` (`count` distinct random
    prompts of `length` tokens) or a JSON list of lists such as `[[3,1,0,2],[2,2,0,1]]`. `heldout` random prompts of
    the same length, disjoint from the training ones, are drawn from `prompt_seed` for evaluation. `vocab_size`
    None is the task's own (its VOCAB_SIZE).
    """
    module = load(task)
    vocab_size = module.VOCAB_SIZE if vocab_size is None else vocab_size
    for name, value in (("vocab size", vocab_size), ("prompt count", count), ("prompt length", length)):
        if value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    if heldout < 0:
        raise ValueError(f"the number of held-out prompts must be >= 0, got {heldout}")
    if not -2**63 <= prompt_seed < 2**64:  # what torch.Generator.manual_seed accepts
        raise ValueError(f"the prompt seed must be an integer from -2**63 to 2**64 - 1, got {prompt_seed}")
    generator = torch.Generator().manual_seed(prompt_seed)
    if spec == "lecture":
        prompts = module.make_task(None, module.VOCAB_SIZE).prompts
    elif spec == "random":
        prompts = random_prompts(count, length, vocab_size, generator)
    else:
        prompts = parse_prompt_list(spec, vocab_size)
    validate_prompts(prompts, vocab_size)  # before the held-out draw relies on them (make_task checks again)
    eval_prompts = (random_prompts(heldout, prompts.shape[1], vocab_size, generator, exclude=prompts,
                                   what="the number of held-out prompts") if heldout else None)
    return module.make_task(prompts, vocab_size, eval_prompts)


def parse_prompt_list(spec: str, vocab_size: int) -> Tensor:
    """A JSON list of equal-length token lists, int[batch pos]; a ValueError that quotes it and says what is allowed."""
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
