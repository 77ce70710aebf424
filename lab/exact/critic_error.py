"""What a learned critic gets wrong, exactly: its error against V^pi, and the gradient GAE gives with it.

    value_error_exact  = E_{s ~ pi}[(V_psi(s) - V^pi(s))^2]
                       = sum_t sum_u P(s_t = u) e(u) / sum_t sum_u P(s_t = u)        e = (V_psi - V^pi)^2
    by position t      = sum_u P(s_t = u) e(u) / sum_u P(s_t = u)                    (the error given t is live)

The states are drawn as the policy visits them, once per live token: the population of the
critic's token-mean regression (verl's value loss). Each prompt weighs as its expected number of live tokens
(the sums run over prompts too; the factorised policy's prompts all weigh L). The factorised
policy's one state is the prompt, so every position has the same error.

The per-response estimator with GAE advantages, g = sum_t A_t grad log pi(a_t | s_t) (summed over
tokens, as `lab.exact.estimators` sums the score over positions), has the exact expectation

    E[g] = sum_t sum_u P(u) sum_w p(w | u) Ahat(u, w) grad log p(w | u)         Ahat: `lab.exact.values`

the gradient of a surrogate whose weights are held fixed. With lambda = 1, Ahat(u, w) = Q^pi(u, w)
- V(u) and E[g] = grad J for any critic (the baseline theorem at every state); with lambda < 1 it
is biased unless V = V^pi, and E[g] - grad J is that bias.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from lab.exact import values as exact_values
from lab.exact import varlen
from lab.exact.enumeration import all_responses
from lab.exact.prefix_tree import prefix_log_softmaxes
from lab.policies.critic import Critic


class CriticError(NamedTuple):
    """E_{s~pi}[(V_psi(s) - V^pi(s))^2] over every visited state, and by position."""

    total: Tensor
    """float[...] (one per run)"""
    by_position: Tensor
    """float[... pos]"""


def critic_state_values(critic: Critic, policy: nn.Module, prompts: Tensor) -> exact_values.Tables:
    """The critic's values at every state, in `lab.exact.values`' layout with the critic's run axis:
    float[run batch] (factorised) or float[run batch V^q] per level q (the prefixes, padded with token 0,
    which the value at position q does not see)."""
    length = policy.response_length
    if not exact_values.is_autoregressive(policy):
        return critic(prompts, torch.zeros(len(prompts), 1, length, dtype=torch.long))[..., 0, 0]
    tables = []
    for q in range(length):
        prefixes = all_responses(policy.vocab_size, q)  # int[V^q q]
        padded = torch.cat([prefixes, prefixes.new_zeros(len(prefixes), length - q)], dim=-1)
        tables.append(critic(prompts, padded.expand(len(prompts), *padded.shape).to(prompts.device))[..., q])
    return tables


def value_error_exact(policy: nn.Module, prompts: Tensor, reward, values: exact_values.Tables,
                      dtype: torch.dtype = torch.float64, truth: exact_values.Tables | None = None,
                      visits: exact_values.Tables | None = None) -> CriticError:
    """The critic's exact squared error at the states the policy visits (module docstring). `truth` (V^pi)
    and `visits` (`lab.exact.values.visit_probs`) may be passed when already at hand."""
    truth = exact_values.state_values(policy, prompts, reward, dtype) if truth is None else truth
    values = values.detach() if isinstance(values, Tensor) else [v.detach() for v in values]
    if not exact_values.is_autoregressive(policy):
        total = ((values.to(dtype) - truth) ** 2).mean(-1)
        return CriticError(total, total.unsqueeze(-1).expand(*total.shape, policy.response_length))
    visits = exact_values.visit_probs(policy, prompts, dtype) if visits is None else visits
    weighted = [((v.to(dtype) - t) ** 2 * w).sum((-2, -1)) for v, t, w in zip(values, truth, visits)]
    mass = [w.sum((-2, -1)) for w in visits]
    by_position = torch.stack([e / m for e, m in zip(weighted, mass)], dim=-1)
    return CriticError(torch.stack(weighted, -1).sum(-1) / torch.stack(mass, -1).sum(-1), by_position)


def expected_gae_gradient(policy: nn.Module, prompts: Tensor, reward, values: exact_values.Tables,
                          lam: float = 1.0, dtype: torch.dtype = torch.float64) -> Tensor:
    """E[g] for one policy and a critic's `values` (no run axis): float[batch params], columns in
    `named_parameters` order, flattened (as `lab.exact.flat_grad`)."""
    advantages = exact_values.gae_advantages_exact(policy, prompts, reward, values, lam, dtype)
    if not exact_values.is_autoregressive(policy):
        probs = varlen.all_probs(policy, prompts, dtype).detach()
        return varlen.expectation_gradient(varlen.score_matrix(policy, prompts, dtype), probs, advantages)
    visits = exact_values.visit_probs(policy, prompts, dtype)
    levels = exact_values.tree_levels(policy, prompts, dtype)
    weights = [(v.unsqueeze(-1) * level.exp() * a) for v, level, a in zip(visits, levels, advantages)]
    params = {name: p.detach().to(dtype) for name, p in policy.named_parameters()}

    def surrogate(params: dict[str, Tensor]) -> Tensor:  # float[batch]: sum of fixed weights * log p(w | u)
        return sum((w * level).sum((-2, -1)) for w, level in zip(weights, prefix_log_softmaxes(params, prompts)))

    jacobian = torch.func.jacrev(surrogate)(params)  # name -> float[batch *shape]
    return torch.cat([jacobian[name].flatten(start_dim=1) for name in params], dim=-1)
