"""Per-token KL estimators and the KL penalty to a reference policy.

With the sampled token y ~ pi_theta and rho = pi_ref(y) / pi_theta(y):

    k1 = -log rho                   unbiased for KL(pi_theta || pi_ref), can be negative
    k2 = (log rho)^2 / 2            biased, always >= 0
    k3 = rho - log rho - 1          unbiased (E[rho] = 1 on-policy), always >= 0  (Schulman)

    kl_estimate = mean over (batch, trial) of  sum over pos of  k    (the sequence estimate: the `kl` metric, k3)
    kl_penalty  = beta * kl_estimate                                   (the loss's term at fixed length; k3 by default)

Where the penalty goes (`KLPlacement`, verl's `use_kl_loss` / `use_kl_in_reward`):

    loss     L = surrogate + beta * agg(k)                 expected gradient beta * E[grad k]
    reward   r' = r - beta * sum over pos of k, detached,  expected gradient beta * E[k * grad log pi]
             before the deltas (PPO-RLHF's penalty)

so k2 in the loss and k1 in the reward both add beta * grad KL(pi_theta || pi_ref), the gradient of
J_beta = E[r] - beta KL(pi_theta || pi_ref); k3 in the loss adds beta * grad KL(pi_ref || pi_theta), the
other direction (claim 14, docs/claims.md, has every pair).

The loss's KL term under any aggregation mode is `lab.core.aggregation.kl_term` (C * agg(k3)); under
token-mean at fixed length it is exactly `kl_estimate` with k3.

The per-position KLs add up over positions because positions are independent
given the prompt. TRL and verl average k3 over tokens instead: at response length
T the same penalty takes their beta = T x the lab's (verl's `low_var_kl` also
clamps k3 to [-10, 10]; the lab never clamps). Used as losses, the estimators' *gradients* differ from their
values (claim 14, docs/claims.md): in expectation grad k1 = 0, grad k2 = grad KL(pi_theta || pi_ref)
and grad k3 = grad KL(pi_ref || pi_theta).

The reference is a frozen deep copy of the policy (the lecture's `model.clone()`
does not exist on a torch module, so its KL runs crashed), refreshed every
`kl_period` epochs; `kl_period = 0` freezes it once at the start.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from lab.core.modes import KLEstimator


def k1(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """-log rho = log pi_theta - log pi_ref, float[... batch trial pos]."""
    return log_probs - ref_log_probs


def k2(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """(log rho)^2 / 2, float[... batch trial pos]."""
    return 0.5 * (ref_log_probs - log_probs) ** 2


def k3(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """rho - log rho - 1 with rho = pi_ref / pi_theta, float[... batch trial pos]."""
    log_rho = ref_log_probs - log_probs
    # expm1: exp(x) - x - 1 rounds below zero for small |x|; expm1(x) - x never does
    return torch.expm1(log_rho) - log_rho


ESTIMATORS = {KLEstimator.k1: k1, KLEstimator.k2: k2, KLEstimator.k3: k3}
"""The one dispatch table: estimator -> f(log_probs, ref_log_probs) per token (verl's `kl_loss_type`)."""


def sequence_kl(log_probs: Tensor, ref_log_probs: Tensor, estimator: KLEstimator | str = "k3",
                mask: Tensor | None = None) -> Tensor:
    """Each response's summed per-token estimate over its live tokens, float[... batch trial]."""
    per_token = ESTIMATORS[KLEstimator(estimator)](log_probs, ref_log_probs)
    if mask is not None:  # where, not a product: an overflowing estimate on padding cannot leak
        per_token = torch.where(mask.bool(), per_token, torch.zeros((), dtype=per_token.dtype))
    return per_token.sum(dim=-1)


def penalized_rewards(rewards: Tensor, log_probs: Tensor, ref_log_probs: Tensor, beta: float | Tensor,
                      estimator: KLEstimator | str = "k3", mask: Tensor | None = None) -> Tensor:
    """r - beta * the summed estimate, detached: the rewards the deltas are made from under `--kl-in reward`,
    float[... batch trial]; beta a float or float[...] per leading index."""
    beta = torch.as_tensor(beta, dtype=rewards.dtype, device=rewards.device)
    penalty = sequence_kl(log_probs.detach(), ref_log_probs.detach(), estimator, mask)
    return rewards - beta.reshape(*beta.shape, *[1] * (rewards.dim() - beta.dim())) * penalty.to(rewards.dtype)


def kl_estimate(log_probs: Tensor, ref_log_probs: Tensor, estimator: KLEstimator | str = "k3") -> Tensor:
    """Sequence KL estimate: per-token estimates summed over pos, averaged over batch and trial -> float[...]."""
    per_token = ESTIMATORS[KLEstimator(estimator)](log_probs, ref_log_probs)
    # one sum over (batch trial pos), then / (batch trial): the same mean of per-sequence sums, but a
    # separate sum over the few positions is a slow reduction (the gradient is the same either way)
    batch, trial = per_token.shape[-3:-1]
    return per_token.sum(dim=(-3, -2, -1)) / (batch * trial)


def kl_penalty(log_probs: Tensor, ref_log_probs: Tensor, beta: float | Tensor,
               estimator: KLEstimator | str = KLEstimator.k3) -> Tensor:
    """beta * the sequence estimate (k3 by default), float[...]; beta may be float[...] per leading index."""
    return beta * kl_estimate(log_probs, ref_log_probs, estimator)


def freeze(policy: nn.Module) -> nn.Module:
    """A frozen copy: same outputs now, no gradient, unaffected by later updates."""
    frozen = copy.deepcopy(policy)
    frozen.requires_grad_(False)
    return frozen


def reference_due(epoch: int, kl_period: int) -> bool:
    """Whether the reference is (re)frozen at the start of `epoch` (epoch 0 always)."""
    return epoch == 0 or (kl_period > 0 and epoch % kl_period == 0)
