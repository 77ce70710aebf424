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

import torch
from torch import Tensor

from lab.exact.enumeration import LIMITS
from lab.exact.varlen import space_size, varlen_responses
from lab.exact.exploration import value_indicators
from tasks import OPTIMAL_TOLERANCE, best_reward
from lab.exact.prefix_tree import tree_pass, varlen_response_probs  # noqa: F401 (re-exported)


def exploration_columns(table: Tensor, optimum: Tensor) -> Tensor:
    """[R optimal] then [R = v] per distinct value, float[batch n k], from the rewards float[batch n]."""
    optimal = (table >= optimum.unsqueeze(-1) - OPTIMAL_TOLERANCE).to(table.dtype)
    return torch.cat([optimal.unsqueeze(-1), value_indicators(table)], dim=-1)


def varlen_exploration(probs: Tensor | list[Tensor], columns: Tensor, group_size: int) -> tuple[Tensor, Tensor]:
    """P(optimal) and P(all G rewards equal), means over prompts: two float[...], from pi(y | x) float[... batch n]
    (`varlen_response_probs`), or consecutive pieces of it, and the columns float[batch n k] of `exploration_columns`."""
    pieces, start, sums = [probs] if isinstance(probs, Tensor) else probs, 0, 0
    for piece in pieces:  # no concatenation: each piece meets its rows of the columns
        rows = columns[:, start:start + piece.shape[-1]].to(piece)  # float[batch n k]
        # as rows^T @ piece^T per prompt (k rows, a column per run): a product with only k output
        # columns runs several times slower on the CPU
        flat = piece.reshape(-1, *piece.shape[-2:]).movedim(-2, 0)  # float[batch (...) n]
        sums = sums + (rows.mT @ flat.mT).permute(2, 0, 1).reshape(*piece.shape[:-1], rows.shape[-1])
        start += piece.shape[-1]
    return sums[..., 0].mean(-1), sums[..., 1:].pow(group_size).sum(-1).mean(-1)


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
