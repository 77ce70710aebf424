"""Tasks: a prompt set, the rewards that score responses to it, and its optimum.

    R(x, y) -> float       the task's rewards, for fixed-length responses and for responses that end with EOS
    y*(x) = targets(x)     a response optimal under every reward of the task (its optimum: R(x, y*(x)))

A task is one file `tasks/NAME.py` (the protocol: docs/architecture.md) that defines `make_task(prompts=None,
vocab_size=VOCAB_SIZE, eval_prompts=None) -> Task` and states REWARD_NAMES, DEFAULT_REWARD and VOCAB_SIZE as
literals (`tasks.catalog` reads them without torch). The lab finds it by name (`tasks.catalog.load`) and reaches
it only through the `Task` it returns. The general prompt code (random prompts, a JSON list, their checks) is
`tasks.prompts`. Rewards are vectorized: `(prompts int[batch pos], responses int[... batch trial pos])
-> float[... batch trial]`, with any leading axes (such as `run`) broadcast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

RewardFn = Callable[["Tensor", "Tensor"], "Tensor"]
VariableLengthFn = Callable[["Tensor", "Tensor", int], "Tensor"]
"""`(prompts int[batch n], responses int[... batch trial pos] over 0..V, EOS = V, eos) -> float[... batch trial]`."""
Reference = Callable[[list, list], float]
"""A reward's plain-Python definition on lists (the specification its tensor code is tested against)."""

LEARNED = "learned:"
"""A reward named `learned:PATH` is a reward model's score (the folder `lab reward-model` wrote at PATH), added to a
task's `rewards` by the command that trains against it (`lab.files.reward_model_folder`)."""

OPTIMAL_TOLERANCE = 1e-6
"""A reward within this of a prompt's optimum counts as optimal (float32 rewards compared exactly)."""


def reward_registry() -> tuple[dict[str, RewardFn], Callable[[str], Callable[[RewardFn], RewardFn]]]:
    """A fresh reward table and the decorator that fills it: `@reward("name")`."""
    table: dict[str, RewardFn] = {}

    def reward(name: str) -> Callable[[RewardFn], RewardFn]:
        def register(fn: RewardFn) -> RewardFn:
            table[name] = fn
            return fn
        return register

    return table, reward


@dataclass(frozen=True)
class Task:
    """Everything the training loop needs to know about a task."""

    name: str
    prompts: Tensor
    """int[batch pos]: the training prompts."""
    vocab_size: int
    response_length: int
    rewards: Mapping[str, RewardFn]
    """name -> vectorized reward function."""
    targets: Callable[[Tensor], Tensor]
    """prompts int[batch pos] -> the correct response int[batch pos] (for exact accuracy)."""
    eval_prompts: Tensor | None = None
    """int[batch pos]: held-out prompts, evaluated greedily but never trained on."""
    variable_length_rewards: Mapping[str, VariableLengthFn] = field(default_factory=dict)
    """name -> the reward of a response that ends at its first EOS (the autoregressive policy)."""
    default_reward: str = ""
    """what a run trains against without `--reward` (empty: the first of `rewards`)"""
    references: Mapping[str, Reference] = field(default_factory=dict)
    """name -> the reward's plain-Python definition on lists (fixed length)."""
    variable_length_references: Mapping[str, Callable[[list, list, int], float]] = field(default_factory=dict)
    """name -> the variable-length reward's plain-Python definition `(prompt, response, eos) -> float`."""
    correct: str | None = None
    """a 0/1 reward whose 1 marks a correct answer, where more than the target is one (greedy and exact accuracy);
    None: a correct answer is the target itself"""
    solved: str = "solved"
    """what a prompt answered by its target is, for a summary line: `3/3 prompts sorted`."""

    def reward_fn(self, name: str) -> RewardFn:
        if name not in self.rewards:
            raise ValueError(f"unknown reward {name!r} for task {self.name!r}; "
                             f"choose one of: {', '.join(self.rewards)}")
        return self.rewards[name]

    def variable_length_reward(self, name: str, eos: int) -> RewardFn:
        """The reward `name` for responses that end with token `eos`: a vectorized RewardFn (a learned reward, which
        scores the whole padded response, as it is)."""
        if name.startswith(LEARNED) and name in self.rewards:
            return self.rewards[name]
        if name not in self.variable_length_rewards:
            raise ValueError(f"unknown reward {name!r} for task {self.name!r}; "
                             f"choose one of: {', '.join(self.variable_length_rewards)}")
        fn = self.variable_length_rewards[name]
        return lambda prompts, responses: fn(prompts, responses, eos)

    def reward_for(self, name: str, eos: int | None) -> RewardFn:
        """The reward `name` for a policy whose responses end with `eos` (None: fixed-length responses)."""
        return self.reward_fn(name) if eos is None else self.variable_length_reward(name, eos)

    def optimum(self, name: str, prompts: Tensor | None = None) -> Tensor:
        """The best achievable reward per prompt, float[batch] (the correct response's reward; `best_reward`)."""
        prompts = self.prompts if prompts is None else prompts
        return best_reward(self.reward_fn(name), prompts, self.targets(prompts))


def best_reward(reward: RewardFn, prompts: Tensor, targets: Tensor) -> Tensor:
    """The best achievable reward per prompt, float[batch]: the target's (sorted(x) is optimal under every sorting
    reward), or a learned reward's own maximum over every response (`reward.optimum`), which need not be there."""
    if hasattr(reward, "optimum"):
        return reward.optimum(prompts)
    return reward(prompts, targets.unsqueeze(-2)).squeeze(-1)  # int[batch 1 pos]: a group of one


def neighbour_rewards(reward: RewardFn, prompts: Tensor, responses: Tensor, vocab_size: int) -> Tensor:
    """The reward of every single-token change of each prompt's response.

        out[..., b, q, v] = R(x_b, y_b with position q set to token v)

    prompts int[batch pos], responses int[... batch pos] (one per prompt) -> float[... batch pos vocab].
    The entry v = y_q is R(x_b, y_b) itself. A response is a local optimum of the reward
    (no single change improves it) when no entry exceeds that value.
    """
    import torch  # here, not above: the package loads without torch, for `tasks.catalog` (`lab --help`)

    *lead, batch, length = responses.shape
    tokens = torch.arange(vocab_size, device=responses.device)
    changed = torch.eye(length, dtype=torch.bool, device=responses.device)  # bool[q pos]: position q is changed
    # candidates[..., b, q, v, :] = y_b with y_q := v
    candidates = torch.where(changed[:, None, :], tokens[None, :, None], responses[..., None, None, :])
    flat = candidates.reshape(*lead, batch, length * vocab_size, length)  # the (q, v) grid plays `trial`
    return reward(prompts, flat).reshape(*lead, batch, length, vocab_size)
