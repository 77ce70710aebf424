"""Gradient diagnostics: how far each delta mode's update is from grad J, and how noisy it is.

For one group of G responses per prompt (the batch the naive loss sees), the batch estimator is
g = (1/B) sum_b g_b with g_b = (1/G) sum_i d_i grad log pi(o_i | x_b) (`lab.exact.estimators`), and

    scale  = <E[g], grad J> / |grad J|^2       1 for raw and loo, (G-1)/G for centered
    angle  = angle(E[g], grad J) in degrees     0 when the expected update is parallel to grad J
    trace  = tr Cov[g] = (1/B^2) sum_b tr Cov[g_b]        (groups of different prompts are independent)

with J = mean_b J_b. Every number is exact (enumeration, `lab.exact.estimators`) unless the
enumeration is past `ExactLimits.max_enumerated`; then it is a Monte Carlo estimate from
`DiagnoseConfig.monte_carlo_groups` sampled groups per prompt, and the row says so
(`method = "monte-carlo"`, `samples` = groups per prompt).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch
from einops import einsum
from torch import Tensor, nn

from lab.core.deltas import REWARD_MODES, DeltaMode, compute_deltas, parse_mode
from lab.exact.estimators import (
    DeltaMoments,
    EnumerationTooLarge,
    check_group_mode,
    delta_moments,
    moments_from_scores,
    resolve_method,
)
from lab.exact.enumeration import (
    ExactLimits,
    LIMITS,
    Reward,
    all_probs,
    expected_reward,
    flat_grad,
    response_index,
    reward_table,
    score_matrix,
)
from lab.policies.sampling import sample_responses

DEFAULT_GROUP_SIZES = (2, 3, 4, 5)


@dataclass(frozen=True)
class DiagnoseConfig:
    """Settings of `gradient_diagnostics`."""

    std_eps: float = 1e-5
    """added to the group std of normalized deltas (the lecture's 1e-5, as in TrainConfig)"""
    std_unbiased: bool = True
    """Bessel-corrected group std, as in TrainConfig"""
    monte_carlo_groups: int = 20_000
    """groups per prompt sampled when an exact enumeration is refused"""
    chunk_groups: int = 2_000
    """groups sampled at once by the Monte Carlo fallback (bounds memory)"""
    limits: ExactLimits = field(default_factory=lambda: LIMITS)
    """size limits of the exact enumerations"""


@dataclass(frozen=True)
class DiagnosticRow:
    """One delta mode at one group size."""

    delta: str
    group_size: int
    scale: float
    """<E[g], grad J> / |grad J|^2"""
    angle_deg: float
    """angle between E[g] and grad J, degrees"""
    trace_cov: float
    """tr Cov[g] of the batch estimator"""
    method: str
    """closed or values (both exact), or monte-carlo"""
    samples: int = 0
    """groups per prompt behind a Monte Carlo row (0 when exact)"""

    def to_dict(self) -> dict:
        return asdict(self)


def _monte_carlo_moments(policy: nn.Module, prompts: Tensor, rewards: Tensor, mode: DeltaMode, G: int,
                         generator: torch.Generator, config: DiagnoseConfig) -> DeltaMoments:
    """Sample estimates of c and M (lab.exact.estimators) from sampled groups; M debiased for tr Cov below."""
    batch, n = rewards.shape
    logits = policy(prompts).detach().double()
    first = torch.zeros_like(rewards)
    second = torch.zeros(batch, n, n, dtype=rewards.dtype)
    done = 0
    while done < config.monte_carlo_groups:
        count = min(config.chunk_groups, config.monte_carlo_groups - done)
        responses = sample_responses(logits, count * G, generator).view(batch, count, G, -1)
        index = response_index(responses, policy.vocab_size)  # int[batch count G]
        deltas = compute_deltas(rewards.gather(-1, index.flatten(1)).view_as(index), mode,
                                config.std_eps, config.std_unbiased)
        # w[b, s, y] = (1/G) sum_i d_i [o_i = y], so g_s = sum_y w[b, s, y] s_y
        weights = torch.zeros(batch, count, n, dtype=rewards.dtype).scatter_add_(-1, index, deltas / G)
        first += weights.sum(1)
        second += einsum(weights, weights, "batch s n, batch s m -> batch n m")
        done += count
    return DeltaMoments(first / done, second / done)


def gradient_diagnostics(
    policy: nn.Module,
    task,
    reward: str | Reward,
    modes: Sequence[DeltaMode | str] = REWARD_MODES,
    group_sizes: Sequence[int] = DEFAULT_GROUP_SIZES,
    generator: torch.Generator | None = None,
    config: DiagnoseConfig = DiagnoseConfig(),
) -> list[DiagnosticRow]:
    """Scale, angle and tr Cov (module docstring) for every mode and G, on `task.prompts`.

    `reward` is a reward name of the task, a vectorized reward or a reward table float[batch n].
    `generator` seeds the Monte Carlo fallback only (default: seed 0).
    """
    if isinstance(reward, str):
        reward = task.reward_fn(reward)
    modes = [check_group_mode(m) for m in modes]
    for G in group_sizes:
        if G < 1:
            raise ValueError(f"group sizes must be >= 1, got {G}")
        for mode in modes:
            compute_deltas(torch.zeros(G), mode)  # the lab's own check: G = 1 has no baseline
    generator = generator or torch.Generator().manual_seed(0)
    prompts = task.prompts
    scores = score_matrix(policy, prompts, torch.float64)  # float[batch n params]
    probs = all_probs(policy, prompts, torch.float64).detach()
    rewards = reward_table(prompts, reward, policy.vocab_size, policy.response_length).to(probs).detach()
    gram = einsum(scores, scores, "batch n params, batch m params -> batch n m")
    batch = len(prompts)

    rows = []
    for mode in modes:
        for G in group_sizes:
            method, samples = resolve_method(mode).value, 0
            try:
                moments = delta_moments(probs, rewards, mode, G, config.std_eps, config.std_unbiased,
                                        limits=config.limits)
            except EnumerationTooLarge:
                moments = _monte_carlo_moments(policy, prompts, rewards, mode, G, generator, config)
                method, samples = "monte-carlo", config.monte_carlo_groups
            result = moments_from_scores(scores, probs, rewards, moments, method, gram)
            trace = result.trace_cov
            if samples:  # the sample covariance divides by N - 1 to be unbiased
                trace = trace * samples / (samples - 1)
            mean, grad_j = result.mean.mean(0), result.grad_j.mean(0)
            rows.append(DiagnosticRow(
                delta=mode.value, group_size=G,
                scale=float(mean @ grad_j / (grad_j @ grad_j)),
                angle_deg=_angle_deg(mean, grad_j),
                trace_cov=float(trace.sum() / batch**2),
                method=method, samples=samples,
            ))
    return rows


def _angle_deg(a: Tensor, b: Tensor) -> float:
    cosine = float(a @ b / (a.norm() * b.norm()))
    return math.degrees(math.acos(max(-1.0, min(1.0, cosine)))) if math.isfinite(cosine) else math.nan


def format_table(rows: Sequence[DiagnosticRow]) -> str:
    """The rows as an aligned text table."""
    lines = [f"{'delta':<11}{'G':>3}  {'scale':>8}  {'angle':>8}  {'tr Cov':>11}  method"]
    for row in rows:
        method = f"{row.method} ({row.samples} groups/prompt)" if row.samples else f"exact ({row.method})"
        lines.append(f"{row.delta:<11}{row.group_size:>3}  {row.scale:>8.4f}  {row.angle_deg:>7.2f}°  "
                     f"{row.trace_cov:>11.4g}  {method}")
    return "\n".join(lines)


def objective_summary(policy: nn.Module, task, reward: str | Reward) -> dict:
    """The exact J per prompt and |grad J| of J = mean over prompts (for a table's header)."""
    reward = task.reward_fn(reward) if isinstance(reward, str) else reward
    J = expected_reward(policy, task.prompts, reward, dtype=torch.float64)
    return {"expected_reward": J.tolist(), "grad_norm": float(flat_grad(J.mean(), policy).norm())}
