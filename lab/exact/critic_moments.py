"""Exact mean and variance of the policy-gradient estimator with a critic's GAE advantages, beside the
group baselines', for either policy: the comparison "the critic reduces the gradient's variance" needs.

For one prompt and G responses y_1..y_G ~ pi i.i.d. (G = 1 is PPO's usual setting):

    GAE       g = (1/G) sum_i h(y_i)         h(y) = sum_t A_t(y) grad log pi(y_t | s_t)     (A_t: `lab.core.gae`)
              E[g] = E[h],   tr Cov[g] = (E|h|^2 - |E h|^2) / G                   (the critic is held fixed)
    group     g = (1/G) sum_i d_i grad log pi(y_i)                                (`lab.exact.estimators`' moments)

Both sum over a response's tokens (no 1/|o|, no whitening: a batch-wide whitening couples the
responses and has no exact form here), so their scales agree. For the factorised policy A_t = R - V(x)
on every token and h(y) = (R - V(x)) grad log pi(y). Every response is enumerated (`lab.exact.varlen`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from einops import einsum
from torch import Tensor, nn

from lab.core.deltas import DeltaMode
from lab.core.gae import gae_advantages, terminal_rewards
from lab.exact import values as exact_values
from lab.exact import varlen
from lab.exact.estimators import delta_moments
from lab.policies import masked_log_probs, ops_of


class EstimatorMoments(NamedTuple):
    """Exact moments of one prompt's estimator g, in the flat parameter order of `lab.exact.flat_grad`."""

    mean: Tensor
    """E[g], float[batch params]"""
    grad_j: Tensor
    """grad J, float[batch params]"""
    trace_cov: Tensor
    """tr Cov[g], float[batch]"""


def _exact_tables(policy: nn.Module, prompts: Tensor, reward, dtype: torch.dtype):
    responses = varlen.enumerate_responses(policy).to(prompts.device)
    probs = varlen.all_probs(policy, prompts, dtype).detach()
    rewards = varlen.reward_table(policy, prompts, reward).to(probs).detach()
    return responses, probs, rewards


def response_advantages(policy: nn.Module, prompts: Tensor, reward, values: exact_values.Tables, lam: float,
                        dtype: torch.dtype = torch.float64) -> Tensor:
    """A_t(y) of every enumerated response for the critic's `values` (`lab.exact.values` layout, no run axis):
    float[batch n pos], 0 on padding (the factorised policy: R - V(x) on every token)."""
    responses, _, rewards = _exact_tables(policy, prompts, reward, dtype)
    mask = varlen.live_mask(policy, responses).expand(len(prompts), *responses.shape)
    if not exact_values.is_autoregressive(policy):
        return (rewards - values.to(dtype).unsqueeze(-1)).unsqueeze(-1).expand(*mask.shape) * mask
    on = exact_values.on_responses(policy, [v.to(dtype) for v in values], responses)
    return gae_advantages(terminal_rewards(rewards, mask), on, mask, lam)[0]


def gae_moments(policy: nn.Module, prompts: Tensor, reward, values: exact_values.Tables, lam: float,
                group_size: int, dtype: torch.dtype = torch.float64) -> EstimatorMoments:
    """E[g], grad J and tr Cov[g] of the GAE estimator with a fixed critic (module docstring)."""
    responses, probs, rewards = _exact_tables(policy, prompts, reward, dtype)
    advantages = response_advantages(policy, prompts, reward, values, lam, dtype)  # float[batch n pos]
    mask = varlen.live_mask(policy, responses)
    expanded = responses.expand(len(prompts), *responses.shape)
    params = {name: p.detach().to(dtype) for name, p in policy.named_parameters()}

    def weighted(params: dict[str, Tensor]) -> Tensor:  # float[batch n]: sum_t A_t log pi(y_t | s_t)
        log_probs = masked_log_probs(ops_of(policy).token_logits(params, prompts, expanded), expanded, mask)
        return (advantages * log_probs).sum(-1)

    jacobian = torch.func.jacrev(weighted)(params)
    h = torch.cat([jacobian[name].flatten(start_dim=2) for name in params], dim=-1)  # float[batch n params]
    mean = einsum(probs, h, "batch n, batch n params -> batch params")
    second = einsum(probs, h * h, "batch n, batch n params -> batch")
    grad_j = varlen.expectation_gradient(varlen.score_matrix(policy, prompts, dtype), probs, rewards)
    return EstimatorMoments(mean, grad_j, (second - (mean ** 2).sum(-1)) / group_size)


def group_moments(policy: nn.Module, prompts: Tensor, reward, mode: DeltaMode | str, group_size: int,
                  std_eps: float = 1e-5, unbiased: bool = True, dtype: torch.dtype = torch.float64) -> EstimatorMoments:
    """E[g], grad J and tr Cov[g] of a group-baseline estimator (`lab.exact.estimators`), for either policy."""
    _, probs, rewards = _exact_tables(policy, prompts, reward, dtype)
    scores = varlen.score_matrix(policy, prompts, dtype)  # float[batch n params]
    moments = delta_moments(probs, rewards, mode, group_size, std_eps, unbiased)
    mean = einsum(moments.first, scores, "batch n, batch n params -> batch params")
    gram = einsum(scores, scores, "batch n params, batch m params -> batch n m")
    trace_cov = (moments.second * gram).sum(dim=(-2, -1)) - (mean ** 2).sum(-1)
    return EstimatorMoments(mean, varlen.expectation_gradient(scores, probs, rewards), trace_cov)
