"""The exploration metrics of the autoregressive policy, exactly, from its prefix tree.

    pi(u EOS | x) = P(u | x) p(EOS | x, u)      for every content prefix u with |u| < L
    pi(u v | x)   = P(u | x) p(v | x, u)        for |u| = L - 1 and content v (truncated at L)
    optimal_prob  = mean_b sum_y pi(y | x_b) [R(x_b, y) >= R*(x_b)]
    zero_std_prob = mean_b sum_v P_b(R = v)^G

the definitions of `lab.exact.exploration` on the variable-length response space (`lab.exact.varlen`
order: by length, then mixed radix), with P(u | x) and p(. | x, u) from `lab.exact.prefix_tree`'s levels,
so no response is scored twice. `SamplingPolicyMetrics` gives the loop these and `kl_exact` from
one tree per epoch; past `lab.exact.LIMITS.max_responses` responses it leaves them empty (NaN)
and the run's `Records.exploration_exact` is False.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from lab.exact.enumeration import LIMITS
from lab.exact.varlen import space_size, varlen_responses
from lab.exact.exploration import value_index
from tasks import OPTIMAL_TOLERANCE, best_reward
from lab.exact.prefix_tree import tree_pass, varlen_response_probs  # noqa: F401 (re-exported)


DENSE_VALUES = 64
"""A reward with at most this many distinct values on a prompt (every task reward: a few) meets the probabilities as
a product with its indicator columns; one with more (a reward model's score: about one value per response) as the
sum of each value's probabilities by index (`ValueIndex`), whose cost grows with n, not n x values (a dense table
of 3906 x 3906 per prompt for the lecture's autoregressive policy)."""


@dataclass(frozen=True)
class ValueIndex:
    """The columns of a reward with many values: [R optimal] float[batch n] and each response's value, int[batch n]
    into `width` distinct values per prompt."""

    optimal: Tensor
    index: Tensor
    width: int


def exploration_columns(table: Tensor, optimum: Tensor) -> Tensor | ValueIndex:
    """[R optimal] then [R = v] per distinct value, float[batch n k], from the rewards float[batch n]; a `ValueIndex`
    past `DENSE_VALUES` values."""
    optimal = (table >= optimum.unsqueeze(-1) - OPTIMAL_TOLERANCE).to(table.dtype)
    index, width = value_index(table)  # int[batch n]: the column of `value_indicators` each response is 1 in
    if width > DENSE_VALUES:
        return ValueIndex(optimal, index, width)
    return torch.cat([optimal.unsqueeze(-1), torch.nn.functional.one_hot(index, width).to(table.dtype)], dim=-1)


def varlen_exploration(probs: Tensor | list[Tensor], columns: Tensor | ValueIndex,
                       group_size: int) -> tuple[Tensor, Tensor]:
    """P(optimal) and P(all G rewards equal), means over prompts: two float[...], from pi(y | x) float[... batch n]
    (`varlen_response_probs`), or consecutive pieces of it, and the columns float[batch n k] of `exploration_columns`
    (or its `ValueIndex`: each value's probability summed by index instead)."""
    pieces, start, sums = [probs] if isinstance(probs, Tensor) else probs, 0, 0
    if isinstance(columns, ValueIndex):
        return indexed_exploration(pieces, columns, group_size)
    for piece in pieces:  # no concatenation: each piece meets its rows of the columns
        rows = columns[:, start:start + piece.shape[-1]].to(piece)  # float[batch n k]
        # as rows^T @ piece^T per prompt (k rows, a column per run): a product with only k output
        # columns runs several times slower on the CPU
        flat = piece.reshape(-1, *piece.shape[-2:]).movedim(-2, 0)  # float[batch (...) n]
        sums = sums + (rows.mT @ flat.mT).permute(2, 0, 1).reshape(*piece.shape[:-1], rows.shape[-1])
        start += piece.shape[-1]
    return sums[..., 0].mean(-1), sums[..., 1:].pow(group_size).sum(-1).mean(-1)


def indexed_exploration(pieces: list[Tensor], columns: ValueIndex, group_size: int) -> tuple[Tensor, Tensor]:
    """`varlen_exploration` for a `ValueIndex`: P(optimal) as a weighted sum, P(R = v) by a scatter-add of each
    response's probability into its value's slot."""
    optimal, mass, start = 0, None, 0
    for piece in pieces:
        rows = slice(start, start + piece.shape[-1])
        optimal = optimal + (piece * columns.optimal[:, rows].to(piece)).sum(-1)
        if mass is None:
            mass = piece.new_zeros(*piece.shape[:-1], columns.width)  # float[... batch values]
        mass = mass.scatter_add(-1, columns.index[:, rows].expand(piece.shape), piece)
        start += piece.shape[-1]
    return optimal.mean(-1), mass.pow(group_size).sum(-1).mean(-1)


class SamplingPolicyMetrics:
    """Each epoch's exact metrics of the sampling policy, from one prefix tree per epoch:
    `kl_exact` to the reference (`lab.exact.prefix_tree`) and `optimal_prob`, `zero_std_prob` above.

        kl_exact = metrics.epoch(policy, fresh_reference)   # float[run], at the epoch's first step
        metrics.exploration()                               # name -> float[run epoch], after the loop

    Past `LIMITS.max_responses` responses (`exact` False) every value is NaN: the tree would be as
    large as the response space.
    """

    def __init__(self, prompts: Tensor, targets: Tensor, rewards: dict, reward_groups, group_size: int,
                 vocab_size: int, length: int) -> None:
        self.prompts, self.reward_groups, self.group_size = prompts, reward_groups, group_size
        self.exact = space_size(vocab_size, length) <= LIMITS.max_responses
        self.columns, self.explored, self.reference = {}, [], None
        if self.exact:
            responses = varlen_responses(vocab_size, length).to(prompts.device)
            for name, reward in rewards.items():
                table = reward(prompts, responses.expand(len(prompts), *responses.shape)).double()  # float[batch n]
                optimum = best_reward(reward, prompts, targets).double()  # sorted(x) + EOS, or a learned maximum
                self.columns[name] = exploration_columns(table, optimum)

    @torch.no_grad()
    def epoch(self, policy, fresh_reference: bool) -> Tensor:
        runs = policy.embedding.shape[0]
        if not self.exact:
            self.explored.append(policy.embedding.new_full((runs, 2), math.nan))
            return policy.embedding.new_full((runs,), math.nan)
        levels, kl, pieces = tree_pass(dict(policy.named_parameters()), self.prompts,
                                      None if fresh_reference else self.reference)
        if fresh_reference:  # the reference is this policy, frozen now
            self.reference = levels
        self.explored.append(self.reward_groups.apply(  # float[run 2]
            lambda name, *pr: torch.stack(varlen_exploration(list(pr), self.columns[name], self.group_size), -1),
            *pieces))
        return kl.mean(dim=-1)

    def exploration(self) -> dict[str, Tensor]:
        optimal, zero_std = torch.stack(self.explored, dim=1).unbind(-1)  # float[run epoch] each
        return dict(optimal_prob=optimal, zero_std_prob=zero_std)
