"""Exact enumeration for any policy of `lab.policies`, variable-length responses included.

    pi(y | x)   = exp sum_q m_q log pi(y_q | x, y_<q)        for every response y up to the cap L
    J(x)        = sum_y pi(y | x) R(x, y),        grad J = sum_y pi(y | x) R(x, y) s_y,   s_y = grad log pi(y | x)
    KL(p || r)  = sum_y p(y) log(p(y) / r(y))  =  E_{y~p} sum_q m_q KL(p(. | y_<q) || r(. | y_<q))   (chain rule)

and the exact expected update of the per-group estimator (one prompt, G i.i.d. responses,
deltas d = compute_deltas(r), the naive surrogate aggregated by `LossAgg`), g = -grad L:

    token-mean               g = sum_i d_i s_i / sum_j |o_j|
    seq-mean-token-mean      g = (1/G) sum_i d_i s_i / |o_i|
    seq-mean-token-sum       g = (1/G) sum_i d_i s_i
    seq-mean-token-sum-norm  g = (1/G) sum_i d_i s_i / C

E[g] = sum_y c_y s_y. For the three per-sequence modes c_y = w(|y|) E[d_1 ; o_1 = y] with the
delta moments of `lab.exact.estimators` (exact, cheap); token-mean couples the group through its
divisor, so c_y sums over all n^G response tuples (`method="tuples"`, also available for every
mode as the reference), refused past `LIMITS.max_enumerated` delta entries; at fixed length its
divisor is the constant G L, so it is seq-mean-token-mean there and needs no tuples.

The autoregressive policy's responses (EOS = V): every content of c < L tokens followed by EOS
(then EOS padding), and every truncated content of L tokens: n = sum_{c<L} V^c + V^L, ordered by
length, then mixed radix (`varlen_responses`). The factorised policy's are `lab.exact`'s V^L.
A space past `LIMITS.max_responses` is refused with a ValueError.
"""

from __future__ import annotations

import torch
from einops import einsum
from torch import Tensor, nn

from lab.core.aggregation import LossAgg, parse_agg
from lab.core.deltas import compute_deltas, parse_mode
from lab.exact.estimators import EnumerationTooLarge, delta_moments
from lab.exact.enumeration import ExactLimits, LIMITS, all_responses
from lab.core.kl import ESTIMATORS, KLEstimator
from lab.policies import masked_log_probs, ops_of
from lab.policies.ar_model import response_mask


def space_size(vocab_size: int, max_length: int) -> int:
    """sum_{c < L} V^c (ended by EOS) + V^L (truncated)."""
    return sum(vocab_size ** c for c in range(max_length)) + vocab_size ** max_length


def varlen_responses(vocab_size: int, max_length: int, limits: ExactLimits = LIMITS) -> Tensor:
    """Every response of the autoregressive policy, int[n pos], EOS = vocab_size as end and padding."""
    size = space_size(vocab_size, max_length)
    if size > limits.max_responses:
        raise ValueError(f"exact enumeration needs at most {limits.max_responses} responses, got {size} for "
                         f"vocab {vocab_size} and max length {max_length}; use a smaller vocabulary or length")
    blocks = []
    for content in range(max_length + 1):
        place = vocab_size ** torch.arange(content - 1, -1, -1)
        tokens = torch.arange(vocab_size ** content).unsqueeze(-1) // place % vocab_size  # int[V^c c]
        padding = torch.full((len(tokens), max_length - content), vocab_size)
        blocks.append(torch.cat([tokens, padding], dim=-1))
    return torch.cat(blocks)


def enumerate_responses(policy: nn.Module, limits: ExactLimits = LIMITS) -> Tensor:
    """Every response the policy can emit, int[n pos]."""
    if ops_of(policy).eos(policy) is None:
        return all_responses(policy.vocab_size, policy.response_length, limits)
    return varlen_responses(policy.vocab_size, policy.response_length, limits)


def live_mask(policy: nn.Module, responses: Tensor) -> Tensor:
    eos = ops_of(policy).eos(policy)
    return torch.ones_like(responses, dtype=torch.bool) if eos is None else response_mask(responses, eos)


def lengths(policy: nn.Module, limits: ExactLimits = LIMITS) -> Tensor:
    """|y| (live tokens, EOS included) of every enumerated response: int[n]."""
    return live_mask(policy, enumerate_responses(policy, limits)).sum(dim=-1)


def _params(policy: nn.Module, dtype: torch.dtype | None) -> dict[str, Tensor]:
    return {name: (p if dtype is None else p.to(dtype)) for name, p in policy.named_parameters()}


def _log_probs(policy, params, prompts, responses, mask):
    """Sequence log-probs float[batch n] of responses int[n pos] for every prompt."""
    expanded = responses.expand(prompts.shape[0], *responses.shape)  # n plays the trial axis
    logits = ops_of(policy).token_logits(params, prompts, expanded)
    return masked_log_probs(logits, expanded, mask).sum(dim=-1)


def all_log_probs(policy: nn.Module, prompts: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """log pi(y | x) for every enumerated response: float[batch n], differentiable."""
    responses = enumerate_responses(policy).to(prompts.device)
    return _log_probs(policy, _params(policy, dtype), prompts, responses, live_mask(policy, responses))


def all_probs(policy: nn.Module, prompts: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    return all_log_probs(policy, prompts, dtype).exp()


def reward_table(policy: nn.Module, prompts: Tensor, reward) -> Tensor:
    """R(x_b, y_i) for every prompt and enumerated response: float[batch n].

    `reward`: a reward name of the lecture's task (`tasks.default_task`; its variable-length version for a policy
    with EOS: `policy_reward`), a vectorized reward function of (prompts, responses int[batch n pos]), or a table
    float[batch n].
    """
    responses = enumerate_responses(policy).to(prompts.device)
    if isinstance(reward, Tensor):
        if reward.shape != (prompts.shape[0], len(responses)):
            raise ValueError(f"a reward table must be float[batch n] = {(prompts.shape[0], len(responses))}, "
                             f"got {tuple(reward.shape)}")
        return reward
    if isinstance(reward, str):
        from tasks.catalog import default_task

        reward = policy_reward(policy, default_task(), reward)
    return reward(prompts, responses.expand(prompts.shape[0], *responses.shape))


def policy_reward(policy: nn.Module, task, name: str):
    """The task's reward `name` as the policy's responses need it: fixed-length, or ending at the policy's EOS."""
    return task.reward_for(name, ops_of(policy).eos(policy))


def expected_reward(policy: nn.Module, prompts: Tensor, reward, dtype: torch.dtype | None = None) -> Tensor:
    """The exact J(x) per prompt, float[batch], differentiable."""
    probs = all_probs(policy, prompts, dtype)
    return (probs * reward_table(policy, prompts, reward).to(probs)).sum(dim=-1)


def score_matrix(policy: nn.Module, prompts: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """s_y = grad log pi(y | x) for every prompt and response: float[batch n params] (detached),
    columns in `named_parameters` order, flattened (as `lab.exact.flat_grad`)."""
    responses = enumerate_responses(policy).to(prompts.device)
    mask = live_mask(policy, responses)
    params = {name: p.detach() for name, p in _params(policy, dtype).items()}
    jacobian = torch.func.jacrev(lambda ps: _log_probs(policy, ps, prompts, responses, mask))(params)
    return torch.cat([jacobian[name].flatten(start_dim=2) for name in params], dim=-1)


def expectation_gradient(scores: Tensor, probs: Tensor, values: Tensor) -> Tensor:
    """grad E_y[f(y)] = sum_y pi(y) f(y) s_y for a fixed table f float[batch n]: float[batch params]."""
    return einsum(probs * values, scores, "batch n, batch n params -> batch params")


def sequence_kl(policy: nn.Module, reference: nn.Module, prompts: Tensor, dtype=torch.float64) -> Tensor:
    """KL(pi_policy || pi_reference) over whole responses by enumeration: float[batch]."""
    log_p, log_r = all_log_probs(policy, prompts, dtype), all_log_probs(reference, prompts, dtype)
    return (log_p.exp() * (log_p - log_r)).sum(dim=-1)


def _token_tables(policy, reference, prompts, dtype):
    """Teacher-forced log-softmaxes of both policies on every response: float[batch n pos tokens] x2, and mask."""
    responses = enumerate_responses(policy).to(prompts.device)
    expanded = responses.expand(prompts.shape[0], *responses.shape)
    tables = [torch.log_softmax(ops_of(p).token_logits(_params(p, dtype), prompts, expanded), dim=-1)
              for p in (policy, reference)]
    return tables[0], tables[1], expanded, live_mask(policy, responses)


def chain_rule_kl(policy: nn.Module, reference: nn.Module, prompts: Tensor, dtype=torch.float64) -> Tensor:
    """E_{y~p} sum_q m_q KL(p(. | x, y_<q) || r(. | x, y_<q)): float[batch] (equals `sequence_kl`)."""
    log_p, log_r, _, mask = _token_tables(policy, reference, prompts, dtype)
    per_position = (log_p.exp() * (log_p - log_r)).sum(dim=-1) * mask  # float[batch n pos]
    return (all_probs(policy, prompts, dtype) * per_position.sum(dim=-1)).sum(dim=-1)


def expected_kl_estimate(policy: nn.Module, reference: nn.Module, prompts: Tensor,
                         estimator: KLEstimator | str = "k3", sampler: nn.Module | None = None,
                         dtype=torch.float64) -> Tensor:
    """E_{y~mu}[sum_q m_q k(log p(y_q | .), log r(y_q | .))] with mu = `sampler` (default: the policy
    itself, on-policy): float[batch]. k is `lab.core.kl.k1/k2/k3` on the sampled tokens."""
    log_p, log_r, responses, mask = _token_tables(policy, reference, prompts, dtype)
    token = lambda table: table.gather(-1, responses.unsqueeze(-1)).squeeze(-1)  # noqa: E731
    per_token = ESTIMATORS[KLEstimator(estimator)](token(log_p), token(log_r)) * mask
    weights = all_probs(policy if sampler is None else sampler, prompts, dtype)
    return (weights * per_token.sum(dim=-1)).sum(dim=-1)


def _sequence_weight(agg: LossAgg, lengths: Tensor, group_size: int, horizon: int) -> Tensor:
    """w(|y|) of the per-sequence modes: g = sum_i w(|o_i|) d_i s_i."""
    return {
        LossAgg.seq_mean_token_mean: lambda: 1.0 / (group_size * lengths),
        LossAgg.seq_mean_token_sum: lambda: torch.full_like(lengths, 1.0 / group_size),
        LossAgg.seq_mean_token_sum_norm: lambda: torch.full_like(lengths, 1.0 / (group_size * horizon)),
    }[agg]()


def _tuple_coefficients(probs, rewards, lengths, mode, agg, group_size, horizon, std_eps, unbiased, limits,
                        chunk: int = 1 << 16, kept: Tensor | None = None) -> Tensor:
    """c_y = sum over all n^G tuples of P(tuple) sum_i [o_i = y] w_i d_i for one prompt: float[n]. `kept` float[n]:
    1 for a response the loss keeps, 0 for one masked whole (truncated), out of token-mean's denominator too."""
    n = len(probs)
    if n ** group_size * group_size > limits.max_enumerated:
        raise EnumerationTooLarge(f"exact expected update over all {n}^{group_size} response tuples would build "
                                  f"{n ** group_size * group_size:,} delta entries, past the limit "
                                  f"{limits.max_enumerated:,}; use a smaller G or response space")
    place = n ** torch.arange(group_size - 1, -1, -1)
    coefficients = torch.zeros(n, dtype=probs.dtype)
    for start in range(0, n ** group_size, chunk):
        index = torch.arange(start, min(start + chunk, n ** group_size)).unsqueeze(-1) // place % n  # int[T G]
        deltas = compute_deltas(rewards[index], mode, std_eps, unbiased)  # float[T G]
        size = lengths[index]
        keep = torch.ones_like(size) if kept is None else kept[index]
        if agg is LossAgg.token_mean:  # a batch of masked responses only adds 0 (TRL's clamp(min=1))
            weights = keep / (size * keep).sum(dim=-1, keepdim=True).clamp(min=1.0).expand_as(size)
        else:
            weights = _sequence_weight(agg, size, group_size, horizon) * keep
        contribution = probs[index].prod(dim=-1, keepdim=True) * weights * deltas
        coefficients.index_add_(0, index.flatten(), contribution.flatten())
    return coefficients


def expected_update(policy: nn.Module, prompts: Tensor, reward, delta, agg: LossAgg | str, group_size: int,
                    horizon: int | None = None, std_eps: float = 1e-5, unbiased: bool = True,
                    method: str = "auto", dtype: torch.dtype = torch.float64,
                    limits: ExactLimits = LIMITS, mask_truncated: bool = False) -> Tensor:
    """E[g] per prompt for the naive surrogate under `agg` (module docstring): float[batch params].

    `horizon` is C of seq-mean-token-sum-norm (default: the max length). `method`: `auto` uses the
    delta moments for the per-sequence modes and tuples for token-mean; `tuples` forces enumeration.
    `mask_truncated`: responses without EOS (cut at the cap) leave the loss, their deltas still made from every
    reward of the group (`--mask-truncated-completions`, DAPO, TRL).
    """
    delta, agg = parse_mode(delta), parse_agg(agg)
    if method not in ("auto", "tuples"):
        raise ValueError(f"unknown method {method!r}; choose one of: auto, tuples")
    horizon = policy.response_length if horizon is None else horizon
    scores = score_matrix(policy, prompts, dtype)
    probs = all_probs(policy, prompts, dtype).detach()
    rewards = reward_table(policy, prompts, reward).to(probs).detach()
    size = lengths(policy).to(probs)
    eos = ops_of(policy).eos(policy)
    kept = None if not mask_truncated or eos is None else \
        (enumerate_responses(policy, limits) == eos).any(dim=-1).to(probs)  # 0: no EOS, truncated
    if kept is not None and agg is LossAgg.token_mean:
        method = "tuples"  # the denominator counts the kept responses' tokens: enumerate the tuples
    if agg is LossAgg.token_mean and method != "tuples" and bool((size == size[0]).all()):
        agg = LossAgg.seq_mean_token_mean  # one length L: sum_j |o_j| = G L, so token-mean's weight is 1 / (G L)
    if method == "tuples" or agg is LossAgg.token_mean:
        coefficients = torch.stack([_tuple_coefficients(p, r, size, delta, agg, group_size, horizon, std_eps,
                                                        unbiased, limits, kept=kept) for p, r in zip(probs, rewards)])
    else:
        first = delta_moments(probs, rewards, delta, group_size, std_eps, unbiased, limits=limits).first
        coefficients = first * group_size * _sequence_weight(agg, size, group_size, horizon)
        coefficients = coefficients if kept is None else coefficients * kept
    return einsum(coefficients, scores, "batch n, batch n params -> batch params")
