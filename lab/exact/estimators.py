"""Exact moments of the per-group policy-gradient estimator, for every delta mode and group size.

For one prompt, G responses o_1..o_G ~ pi i.i.d., rewards r_i = R(o_i), deltas
d = compute_deltas(r, mode), scores s_y = grad log pi(y):

    g           = (1/G) sum_i d_i s_{o_i}
    E[g]        = sum_y c_y s_y                   c_y    = E[d_1 ; o_1 = y]
    E[g g^T]    = sum_{y,y'} M_yy' s_y s_y'^T     M_yy'  = [y = y'] E[d_1^2 ; o_1 = y] / G
                                                          + (G-1)/G E[d_1 d_2 ; o_1 = y, o_2 = y']
    tr Cov[g]   = <M, K> - c^T K c                K      = S S^T (the scores' Gram matrix)

where E[X ; A] = E[X 1_A]. This uses only that the deltas are permutation-equivariant
and the responses i.i.d., so (o_i, o_j, d_i, d_j) is distributed as (o_1, o_2, d_1, d_2).
`g` is what the naive loss's gradient estimates, up to the factor 1 / (batch * L) of its mean.

Three exact ways to get c and M (`Method`):
- closed: raw, centered and loo deltas are linear, d_1 = a r_1 - b sum_{j>1} r_j with
  (a, b) = (1, 0), ((G-1)/G, 1/G), (1, 1/(G-1)), so c and M follow from the mean and second
  moment of R;
- values: any mode. d depends on the responses only through their rewards, so condition on
  r_1 (and r_2) and enumerate multisets of the other rewards' distinct values, weighted by
  multinomial probabilities; cheap when R takes few values (the sorting rewards take <= 6);
- tuples: any mode, brute force over all n^G response tuples (the reference for the other two).
Past `LIMITS.max_enumerated` an enumeration is refused with a ValueError.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from enum import Enum

import torch
from einops import einsum
from torch import Tensor, nn

from lab.core.deltas import REWARD_MODES, DeltaMode, compute_deltas, parse_mode
from lab.core.modes import NEEDS_CRITIC
from lab.exact.enumeration import ExactLimits, LIMITS, Reward, all_probs, all_responses, reward_table, score_matrix


class Method(str, Enum):
    """How the delta moments are computed; all are exact."""

    auto = "auto"  # closed for the linear modes, else values
    closed = "closed"
    values = "values"
    tuples = "tuples"


LINEAR_COEFFICIENTS = {
    DeltaMode.raw: lambda G: (1.0, 0.0),
    DeltaMode.centered: lambda G: ((G - 1) / G, 1 / G),
    DeltaMode.loo: lambda G: (1.0, 1 / (G - 1)),
}
"""mode -> G -> (a, b) with d_1 = a r_1 - b sum_{j>1} r_j."""


@dataclass(frozen=True)
class DeltaMoments:
    """Response-level moments of one prompt's deltas (see the module docstring)."""

    first: Tensor
    """c, float[batch n]: E[d_1 ; o_1 = y]"""
    second: Tensor
    """M, float[batch n n]"""


def _sum_square(count: int, mean: Tensor, square: Tensor) -> Tensor:
    """E[S^2] for S a sum of `count` i.i.d. rewards with E[R] = mean, E[R^2] = square."""
    return count * (square - mean**2) + count**2 * mean**2


def _closed_moments(probs: Tensor, rewards: Tensor, mode: DeltaMode, G: int) -> DeltaMoments:
    a, b = LINEAR_COEFFICIENTS[mode](G)
    mean = (probs * rewards).sum(-1, keepdim=True)  # float[batch 1]
    square = (probs * rewards**2).sum(-1, keepdim=True)
    first = probs * (a * rewards - b * (G - 1) * mean)
    diagonal = probs * (a**2 * rewards**2 - 2 * a * b * (G - 1) * rewards * mean
                        + b**2 * _sum_square(G - 1, mean, square))
    second = torch.diag_embed(diagonal) / G
    if G > 1:
        r, r_other = rewards.unsqueeze(-1), rewards.unsqueeze(-2)  # float[batch n 1], float[batch 1 n]
        left, right = a * r - b * r_other, a * r_other - b * r
        mean, square = mean.unsqueeze(-1), square.unsqueeze(-1)
        cross = (left * right - b * (left + right) * (G - 2) * mean + b**2 * _sum_square(G - 2, mean, square))
        second = second + (G - 1) / G * probs.unsqueeze(-1) * probs.unsqueeze(-2) * cross
    return DeltaMoments(first, second)


class EnumerationTooLarge(ValueError):
    """An exact enumeration past `ExactLimits.max_enumerated` (callers may fall back to Monte Carlo)."""


def _check_size(entries: int, what: str, limits: ExactLimits) -> None:
    if entries > limits.max_enumerated:
        raise EnumerationTooLarge(f"exact {what} would build {entries:,} delta entries, past the limit "
                         f"{limits.max_enumerated:,}; use a smaller G or a Monte Carlo estimate")


def _multisets(probs: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """Every multiset of `size` draws from a categorical `probs` float[K]: indices int[T size], probs float[T]."""
    rows = list(itertools.combinations_with_replacement(range(len(probs)), size))
    index = torch.tensor(rows, dtype=torch.long).reshape(len(rows), size)
    counts = nn.functional.one_hot(index, len(probs)).sum(dim=-2).to(probs)  # float[T K]
    log_multinomial = math.lgamma(size + 1) - torch.lgamma(counts + 1).sum(-1)
    return index, torch.exp(log_multinomial) * probs[index].prod(dim=-1)


def _value_moments_one(probs: Tensor, rewards: Tensor, mode: DeltaMode, G: int, std_eps: float,
                       unbiased: bool, limits: ExactLimits) -> tuple[Tensor, Tensor]:
    values, which = torch.unique(rewards, return_inverse=True)  # float[K], int[n]
    K = len(values)
    value_probs = torch.zeros_like(values).index_add(0, which, probs)  # float[K]
    _check_size(K * math.comb(K + G - 2, G - 1) * G, f"moments (mode {mode.value}, G = {G})", limits)
    others, weight = _multisets(value_probs, G - 1)
    groups = torch.cat([values.view(K, 1, 1).expand(K, len(weight), 1),
                        values[others].expand(K, *others.shape)], dim=-1)  # float[K T G]
    d = compute_deltas(groups, mode, std_eps, unbiased)[..., 0]
    first = probs * (d * weight).sum(-1)[which]
    second = torch.diag(probs * (d**2 * weight).sum(-1)[which]) / G
    if G > 1:
        _check_size(K * K * math.comb(K + G - 3, G - 2) * G, f"moments (mode {mode.value}, G = {G})", limits)
        rest, weight = _multisets(value_probs, G - 2)
        pairs = torch.cat([values.view(K, 1, 1, 1).expand(K, K, len(weight), 1),
                           values.view(1, K, 1, 1).expand(K, K, len(weight), 1),
                           values[rest].expand(K, K, *rest.shape)], dim=-1)  # float[K K T G]
        d = compute_deltas(pairs, mode, std_eps, unbiased)
        cross = (d[..., 0] * d[..., 1] * weight).sum(-1)  # float[K K]
        second = second + (G - 1) / G * torch.outer(probs, probs) * cross[which][:, which]
    return first, second


def _tuple_moments_one(probs: Tensor, rewards: Tensor, mode: DeltaMode, G: int, std_eps: float,
                       unbiased: bool, limits: ExactLimits) -> tuple[Tensor, Tensor]:
    n = len(probs)
    _check_size(n**G * G, f"tuple enumeration (n = {n}, G = {G})", limits)
    tuples = all_responses(n, G, ExactLimits(max_responses=n**G))  # int[T G]: the mixed-radix enumerator again
    weight = probs[tuples].prod(dim=-1)
    d = compute_deltas(rewards[tuples], mode, std_eps, unbiased)  # float[T G]
    first = torch.zeros_like(probs).index_add(0, tuples[:, 0], weight * d[:, 0])
    second = torch.diag(torch.zeros_like(probs).index_add(0, tuples[:, 0], weight * d[:, 0] ** 2)) / G
    if G > 1:
        cross = torch.zeros(n * n, dtype=probs.dtype).index_add(
            0, tuples[:, 0] * n + tuples[:, 1], weight * d[:, 0] * d[:, 1])
        second = second + (G - 1) / G * cross.view(n, n)
    return first, second


def resolve_method(mode: DeltaMode | str, method: Method | str = Method.auto) -> Method:
    """`auto` is `closed` for the linear modes and `values` otherwise."""
    method = Method(method)
    if method is Method.auto:
        return Method.closed if parse_mode(mode) in LINEAR_COEFFICIENTS else Method.values
    return method


def check_group_mode(mode: DeltaMode | str) -> DeltaMode:
    """The mode, if its deltas are a function of one group's rewards (`lab.core.deltas.REWARD_MODES`); else a
    ValueError saying why its moments are not one group's and which modes these moments cover."""
    mode = parse_mode(mode)
    covered = ", ".join(m.value for m in REWARD_MODES)
    if mode in NEEDS_CRITIC:
        raise ValueError(f"delta mode {mode.value!r} takes its advantages from a learned critic, not from the "
                         f"rewards; its exact moments are lab.exact.critic_moments.gae_moments (these cover {covered})")
    if mode not in REWARD_MODES:
        raise ValueError(f"delta mode {mode.value!r} divides by the whole batch's standard deviation, which reads "
                         f"every other prompt's group, so its moments are not one group's; these cover {covered}")
    return mode


def delta_moments(probs: Tensor, rewards: Tensor, mode: DeltaMode | str, group_size: int,
                  std_eps: float = 1e-5, unbiased: bool = True, method: Method | str = Method.auto,
                  limits: ExactLimits = LIMITS) -> DeltaMoments:
    """c and M (module docstring) from probs float[batch n] and a reward table float[batch n].

    `std_eps` and `unbiased` are passed to `compute_deltas` (they matter for `normalized` only).
    """
    mode, method = check_group_mode(mode), resolve_method(mode, method)
    if group_size < 1:
        raise ValueError(f"group size must be >= 1, got {group_size}")
    compute_deltas(torch.zeros(group_size), mode)  # the lab's own check: G = 1 has no baseline
    if method is Method.closed:
        if mode not in LINEAR_COEFFICIENTS:
            raise ValueError(f"no closed form for delta mode {mode.value!r}; "
                             f"it exists for {', '.join(m.value for m in LINEAR_COEFFICIENTS)}")
        return _closed_moments(probs, rewards, mode, group_size)
    one = _value_moments_one if method is Method.values else _tuple_moments_one
    parts = [one(p, r, mode, group_size, std_eps, unbiased, limits) for p, r in zip(probs, rewards)]
    return DeltaMoments(torch.stack([f for f, _ in parts]), torch.stack([s for _, s in parts]))


def first_moment(probs: Tensor, rewards: Tensor, mode: DeltaMode | str, group_size: int,
                 std_eps: float = 1e-5, unbiased: bool = True, limits: ExactLimits = LIMITS) -> Tensor:
    """c = E[d_1 ; o_1 = y] alone, float[batch n]: `delta_moments(...).first` without the n x n second moment
    (closed form for the linear modes, else the reward values' multisets)."""
    mode = check_group_mode(mode)
    compute_deltas(torch.zeros(group_size), mode)  # the lab's own check: G = 1 has no baseline
    if mode in LINEAR_COEFFICIENTS:
        a, b = LINEAR_COEFFICIENTS[mode](group_size)
        return probs * (a * rewards - b * (group_size - 1) * (probs * rewards).sum(-1, keepdim=True))
    rows = []
    for p, r in zip(probs, rewards):
        values, which = torch.unique(r, return_inverse=True)
        value_probs = torch.zeros_like(values).index_add(0, which, p)
        _check_size(len(values) * math.comb(len(values) + group_size - 2, group_size - 1) * group_size,
                    f"first moment (mode {mode.value}, G = {group_size})", limits)
        others, weight = _multisets(value_probs, group_size - 1)
        groups = torch.cat([values.view(-1, 1, 1).expand(len(values), len(weight), 1),
                            values[others].expand(len(values), *others.shape)], dim=-1)  # float[K T G]
        d = compute_deltas(groups, mode, std_eps, unbiased)[..., 0]
        rows.append(p * (d * weight).sum(-1)[which])
    return torch.stack(rows)


@dataclass(frozen=True)
class GradientMoments:
    """Exact moments of the per-group estimator g, per prompt, in parameter space."""

    mean: Tensor
    """E[g], float[batch params]"""
    grad_j: Tensor
    """grad J, float[batch params]"""
    trace_cov: Tensor
    """tr Cov[g], float[batch]"""
    method: Method


def _scores_and_moments(policy, prompts, reward, mode, group_size, std_eps, unbiased, method, dtype, limits):
    scores = score_matrix(policy, prompts, dtype)  # float[batch n params]
    probs = all_probs(policy, prompts, dtype).detach()
    rewards = reward_table(prompts, reward, policy.vocab_size, policy.response_length).to(probs).detach()
    moments = delta_moments(probs, rewards, mode, group_size, std_eps, unbiased, method, limits)
    mean = einsum(moments.first, scores, "batch n, batch n params -> batch params")
    return scores, probs, rewards, moments, mean


def moments_from_scores(scores: Tensor, probs: Tensor, rewards: Tensor, moments: DeltaMoments,
                        method: Method, gram: Tensor | None = None) -> GradientMoments:
    """E[g], grad J and tr Cov[g] from scores float[batch n params], probs and rewards float[batch n].

    `gram` (float[batch n n], S S^T) may be passed to reuse it across modes and group sizes.
    """
    mean = einsum(moments.first, scores, "batch n, batch n params -> batch params")
    grad_j = einsum(probs * rewards, scores, "batch n, batch n params -> batch params")
    gram = einsum(scores, scores, "batch n params, batch m params -> batch n m") if gram is None else gram
    trace_cov = (moments.second * gram).sum(dim=(-2, -1)) - (mean**2).sum(-1)
    return GradientMoments(mean, grad_j, trace_cov, method)


def gradient_moments(policy: nn.Module, prompts: Tensor, reward: Reward, mode: DeltaMode | str,
                     group_size: int, std_eps: float = 1e-5, unbiased: bool = True,
                     method: Method | str = Method.auto, dtype: torch.dtype = torch.float64,
                     limits: ExactLimits = LIMITS) -> GradientMoments:
    """E[g], grad J and tr Cov[g] for every prompt (flat parameter order of `lab.exact.flat_grad`)."""
    scores, probs, rewards, moments, _ = _scores_and_moments(
        policy, prompts, reward, mode, group_size, std_eps, unbiased, method, dtype, limits)
    return moments_from_scores(scores, probs, rewards, moments, resolve_method(mode, method))


def gradient_covariance(policy: nn.Module, prompts: Tensor, reward: Reward, mode: DeltaMode | str,
                        group_size: int, std_eps: float = 1e-5, unbiased: bool = True,
                        method: Method | str = Method.auto, dtype: torch.dtype = torch.float64,
                        limits: ExactLimits = LIMITS) -> Tensor:
    """The full Cov[g] = S^T M S - E[g] E[g]^T per prompt: float[batch params params]."""
    scores, _, _, moments, mean = _scores_and_moments(
        policy, prompts, reward, mode, group_size, std_eps, unbiased, method, dtype, limits)
    second = einsum(scores, moments.second, scores, "batch n p, batch n m, batch m q -> batch p q")
    return second - mean.unsqueeze(-1) * mean.unsqueeze(-2)
