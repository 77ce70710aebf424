"""Exact enumeration of the factorised policy: the response space is small, so expectations are sums.

    pi(y | x)     = prod_q pi_q(y_q | x)                 for every one of the V^L responses y
    J(x)          = sum_y pi(y | x) R(x, y)               (autograd of this sum gives grad J exactly)
    s_y           = grad_theta log pi(y | x)              (the score of response y, one row per y)
    KL_q          = sum_v pi_q(v) (log pi_q(v) - log ref_q(v))          per response position q
    E_mu[w k]     = sum_v mu_q(v) w_q(v) k(pi_q(v), ref_q(v))           k in {k1, k2, k3}

Positions are independent given the prompt (`lab.policies.factorized`), so per-position
expectations are sums over V tokens and sequence ones over V^L responses.
Responses are enumerated in mixed-radix order: response i has token
`(i // V^(L-1-q)) % V` at position q (`all_responses`, `response_index`).

Everything stays differentiable; pass `dtype=torch.float64` to evaluate the policy
in double precision (gradients still reach the policy's own parameters).
A response space past `LIMITS.max_responses` is refused with a ValueError (pass@k and maj@k,
from `lab.exact.voting`, fall back to a Monte Carlo estimate with a warning instead).
Moments of the policy-gradient estimator live in `lab.exact.estimators`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from lab.core.kl import ESTIMATORS, KLEstimator
from lab.policies.sampling import response_log_probs


@dataclass(frozen=True)
class ExactLimits:
    """How large an exact computation may grow before it is refused."""

    max_responses: int = 4096
    """largest response space V^L per prompt that is enumerated (V = 5, L = 5 is 3125)"""
    max_enumerated: int = 20_000_000
    """largest number of delta entries (groups x G) an estimator enumeration may build (lab.exact.estimators)"""


LIMITS = ExactLimits()

Reward = Callable[[Tensor, Tensor], Tensor] | Tensor | str
"""A vectorized reward `(int[batch pos], int[... batch trial pos]) -> float[... batch trial]`, the
name of one the sorting task registers (`"distance"`), or a reward table float[batch n] giving
R(x_b, y_i) for response i of `all_responses`."""


def check_space(vocab_size: int, length: int, limits: ExactLimits = LIMITS) -> int:
    """The number of responses V^L, or a ValueError when it is past `limits.max_responses`."""
    size = vocab_size ** length
    if size > limits.max_responses:
        raise ValueError(f"exact enumeration needs vocab^length <= {limits.max_responses} responses, got "
                         f"{vocab_size}^{length} = {size}; use a smaller vocabulary or shorter prompts")
    return size


def all_responses(vocab_size: int, length: int, limits: ExactLimits = LIMITS) -> Tensor:
    """Every response, int[n pos] with n = vocab_size ** length, in mixed-radix order."""
    size = check_space(vocab_size, length, limits)
    place = vocab_size ** torch.arange(length - 1, -1, -1)  # int[pos]: V^(L-1-q)
    return torch.arange(size).unsqueeze(-1) // place % vocab_size


def response_index(responses: Tensor, vocab_size: int) -> Tensor:
    """The row of `all_responses` holding each response: int[... pos] -> int[...]."""
    length = responses.shape[-1]
    place = vocab_size ** torch.arange(length - 1, -1, -1, device=responses.device)
    return (responses * place).sum(dim=-1)


def _policy_logits(policy: nn.Module, prompts: Tensor, dtype: torch.dtype | None) -> Tensor:
    """float[batch pos vocab]; with `dtype`, the parameters are cast (differentiably) first."""
    if dtype is None:
        return policy(prompts)
    params = {name: p.to(dtype) for name, p in policy.named_parameters()}
    return torch.func.functional_call(policy, params, (prompts,))


def position_log_probs(policy: nn.Module, prompts: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """log pi_q(v | x) for every position and token: float[batch pos vocab]."""
    return torch.log_softmax(_policy_logits(policy, prompts, dtype), dim=-1)


def _sequence_log_probs(logits: Tensor) -> Tensor:
    """float[batch pos vocab] -> log pi(y | x) of every response, float[batch n]."""
    batch, length, vocab_size = logits.shape
    responses = all_responses(vocab_size, length).to(logits.device)
    responses = responses.expand(batch, *responses.shape)  # int[batch n pos]: n plays the trial axis
    return response_log_probs(logits, responses).sum(dim=-1)


def all_log_probs(policy: nn.Module, prompts: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """log pi(y | x) for every response y (sum of per-position log-probs): float[batch n]."""
    return _sequence_log_probs(_policy_logits(policy, prompts, dtype))


def all_probs(policy: nn.Module, prompts: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """pi(y | x) for every response y: float[batch n] (each row sums to 1)."""
    return all_log_probs(policy, prompts, dtype).exp()


def reward_table(prompts: Tensor, reward: Reward, vocab_size: int, length: int) -> Tensor:
    """R(x_b, y_i) for every prompt and every response: float[batch n].

    `reward` is a vectorized reward function or already a table float[batch n] (returned as is).
    """
    size = check_space(vocab_size, length)
    if isinstance(reward, str):
        from tasks.catalog import default_task  # a reward name alone: the lecture's task's

        reward = default_task().reward_fn(reward)
    if isinstance(reward, Tensor):
        if reward.shape != (prompts.shape[0], size):
            raise ValueError(f"a reward table must be float[batch n] = {(prompts.shape[0], size)}, "
                             f"got {tuple(reward.shape)}")
        return reward
    responses = all_responses(vocab_size, length).to(prompts.device)
    return reward(prompts, responses.expand(prompts.shape[0], *responses.shape))


def expected_reward(policy: nn.Module, prompts: Tensor, reward: Reward,
                    dtype: torch.dtype | None = None) -> Tensor:
    """The exact J(x) = sum_y pi(y | x) R(x, y) per prompt: float[batch], differentiable.

    `reward`: a vectorized reward function such as sorting's `distance_reward`, or a
    reward table float[batch n] over `all_responses(vocab, length)`.
    """
    prompts = torch.as_tensor(prompts, dtype=torch.long)  # a list of lists is fine too
    log_probs = all_log_probs(policy, prompts, dtype)
    table = reward_table(prompts, reward, policy.vocab_size, policy.response_length)
    return (log_probs.exp() * table.to(log_probs)).sum(dim=-1)


def parameter_vector(policy: nn.Module) -> list[tuple[str, Tensor]]:
    """The policy's parameters in the order every flat gradient here uses (named_parameters)."""
    return list(policy.named_parameters())


def flat_grad(value: Tensor, policy: nn.Module, create_graph: bool = False) -> Tensor:
    """The gradient of a scalar with respect to all parameters, flattened: float[params].

    The graph is kept, so several gradients of one forward pass can be compared.
    """
    params = [p for _, p in parameter_vector(policy)]
    grads = torch.autograd.grad(value, params, retain_graph=True, create_graph=create_graph, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).flatten() for p, g in zip(params, grads)])


def score_matrix(policy: nn.Module, prompts: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """s_y = grad_theta log pi(y | x) for every prompt and response: float[batch n params] (detached).

    Columns follow `parameter_vector(policy)`, flattened, as in `flat_grad`.
    """
    params = {name: p.detach().to(dtype or p.dtype) for name, p in parameter_vector(policy)}

    def log_probs_of(params: dict[str, Tensor]) -> Tensor:
        return _sequence_log_probs(torch.func.functional_call(policy, params, (prompts,)))

    jacobian = torch.func.jacrev(log_probs_of)(params)  # name -> float[batch n *shape]
    return torch.cat([jacobian[name].flatten(start_dim=2) for name in params], dim=-1)


def exact_kl(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """KL(p || r) per position from log-prob tables float[... pos vocab] -> float[... pos].

    `exact_kl(lp, ref)` is KL(pi_theta || pi_ref); swap the arguments for KL(pi_ref || pi_theta).
    Differentiable in both, so autograd gives its exact gradient.
    """
    return (log_probs.exp() * (log_probs - ref_log_probs)).sum(dim=-1)


def sequence_kl(policy: nn.Module, reference: nn.Module, prompts: Tensor,
                dtype: torch.dtype | None = None) -> Tensor:
    """KL(pi_policy(. | x) || pi_reference(. | x)) over whole responses: float[batch].

    Positions are independent given the prompt, so it is the sum of the per-position KLs
    (`exact_kl`); for example the drift of a trained policy from its initialisation.
    """
    return exact_kl(position_log_probs(policy, prompts, dtype), position_log_probs(reference, prompts, dtype)).sum(-1)


def expected_kl_estimate(
    estimator: KLEstimator | str,
    log_probs: Tensor,
    ref_log_probs: Tensor,
    sample_log_probs: Tensor | None = None,
    importance_weighted: bool = False,
) -> Tensor:
    """E_{v ~ mu_q}[w(v) k(v)] per position, from log-prob tables float[... pos vocab] -> float[... pos].

    k is `lab.core.kl.k1/k2/k3` evaluated at (log pi_theta(v), log pi_ref(v)).
    - `sample_log_probs=None`: mu = pi_theta itself, with gradient through the sampling
      weights, so autograd gives the gradient *of the expectation*;
    - `sample_log_probs=log_probs.detach()`: mu = pi_theta as fixed samples, so autograd gives
      the expected gradient *of the estimator used as a loss* (claim 14, docs/claims.md);
    - any other table: samples from a different policy mu (e.g. a stale pi_old, claim 7).
    `importance_weighted` multiplies by w = pi_theta / mu (gradient flows through pi_theta).
    """
    per_token = ESTIMATORS[KLEstimator(estimator)](log_probs, ref_log_probs)
    sample_log_probs = log_probs if sample_log_probs is None else sample_log_probs
    if importance_weighted:
        per_token = per_token * torch.exp(log_probs - sample_log_probs)
    return (sample_log_probs.exp() * per_token).sum(dim=-1)
