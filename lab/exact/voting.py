"""pass@k and maj@k of a response distribution, exactly: k independent samples, then "any" or "vote".

    pass@k = 1 - (1 - p*)^k,     p* = sum over optimal responses o of p_o
    maj@k  = P(the plurality winner of k samples is optimal; a tie is broken uniformly at random)
           = sum_o sum_{c=1..k} k!/c! p_o^c [x^(k-c)] E_{y~U(0,1)} prod_{j != o} h_c(p_j x, y)
             with h_c(u, y) = sum_{n<c} u^n / n! + y u^c / c!

maj@k's sum is over c = the number of votes for o: every other response must get at most c votes
(the exponential generating function of a multinomial count capped at c), and each of the T other
responses that also get exactly c halves o's chance in the tie-break: E_y[y^T] = 1/(1+T). The
y-expectation is a polynomial of degree <= (k-c)/c in y, integrated exactly by Gauss-Legendre.
For c > (k-c) no other response can reach c, and the term is the binomial one. Everything is a
positive sum (no cancellation), in float64. These are pure functions of probability and reward
tables; `lab.exact.pass_at_k` and `lab.exact.maj_at_k` take a policy. The plain check is a
brute-force enumeration of all n^k sample sequences (tests/exact/test_voting.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

import lab.exact.enumeration as enumeration
from tasks import OPTIMAL_TOLERANCE



def optimal_mask(rewards: Tensor) -> Tensor:
    """bool[... n]: the responses whose reward is the prompt's largest (within OPTIMAL_TOLERANCE)."""
    return rewards >= rewards.amax(dim=-1, keepdim=True) - OPTIMAL_TOLERANCE


def pass_at_k_from_probs(probs: Tensor, rewards: Tensor, ks: Sequence[int]) -> Tensor:
    """1 - (1 - p*)^k for every k: probs, rewards float[... n] -> float[... len(ks)]."""
    p_opt = (probs * optimal_mask(rewards)).sum(dim=-1, keepdim=True).clamp(0, 1)
    k = torch.as_tensor(list(ks), dtype=probs.dtype, device=probs.device)
    return -torch.expm1(k * torch.log1p(-p_opt))  # 1 - (1 - p)^k without losing a tiny p to rounding


def _capped_product(others: Tensor, c: int, degree: int, nodes: Tensor) -> Tensor:
    """[x^m] prod_j h_c(p_j x, y) for m = 0..degree at each y node: others float[D n] -> float[D Y degree+1].

    One factor at a time: new[m] = sum_{n <= c} w_n state[m - n], w_n = p_j^n / n! (times y for n = c).
    """
    width = min(c, degree)  # powers above `degree` are dropped
    inverse_factorial = [1 / math.factorial(i) for i in range(width + 1)]
    state = torch.zeros(others.shape[0], len(nodes), degree + 1, dtype=others.dtype)
    state[..., 0] = 1
    y = nodes.to(others)[:, None]  # float[Y 1]
    for j in range(others.shape[1]):
        p = others[:, j, None, None]  # float[D 1 1]
        if not bool((p > 0).any()):
            continue
        new = state.clone()  # n = 0: w_0 = 1
        power = torch.ones_like(p)
        for i in range(1, width + 1):
            power = power * p
            w = power * inverse_factorial[i] * (y if i == c else 1)
            new[..., i:] += w * state[..., :-i]
        state = new
    return state


def maj_at_k_from_probs(probs: Tensor, rewards: Tensor, ks: Sequence[int]) -> Tensor:
    """P(the plurality vote of k samples is optimal), ties broken at random: float[... n] -> float[... len(ks)]."""
    ks = list(ks)
    if not ks or min(ks) < 1:
        raise ValueError(f"every k must be a positive integer, got {ks}")
    lead, n = probs.shape[:-1], probs.shape[-1]
    p = probs.detach().double().reshape(-1, n).cpu()
    optimal = optimal_mask(rewards.detach().expand(*lead, n).reshape(-1, n).cpu())
    top = max(ks)
    log_fact = torch.lgamma(torch.arange(top + 1, dtype=torch.float64) + 1)
    wins = torch.zeros(len(p), top + 1, dtype=torch.float64)  # wins[:, k] = P(an optimal response wins)
    k_all = torch.arange(top + 1, dtype=torch.float64)
    for o in range(n):
        rows = optimal[:, o].nonzero().flatten()  # only the distributions in which o is optimal
        if len(rows) == 0:
            continue
        p_o = p[rows, o, None]  # float[D 1]
        others = p[rows].clone()
        others[:, o] = 0
        for c in range(1, top + 1):
            degree = top - c
            k = k_all[c:]  # every k >= c at once
            if c > degree:  # no other response can reach c votes: binomial(k, c) p_o^c (1 - p_o)^(k - c)
                binomial = torch.exp(log_fact[c:] - log_fact[c] - log_fact[:top + 1 - c])
                wins[rows, c:] += binomial * p_o**c * (1 - p_o) ** (k - c)
                continue
            # the tie polynomial in y has degree <= degree // c: Gauss-Legendre with that many // 2 + 1 nodes
            x, w = np.polynomial.legendre.leggauss(degree // c // 2 + 1)
            nodes, weights = torch.tensor((x + 1) / 2), torch.tensor(w / 2)
            # E_y of the capped product: float[D degree+1]
            coef = torch.einsum("dym,y->dm", _capped_product(others, c, degree, nodes), weights)
            wins[rows, c:] += torch.exp(log_fact[c:] - log_fact[c]) * p_o**c * coef
    return wins[:, ks].reshape(*lead, len(ks)).to(probs.dtype).clamp(0, 1)


def brute_force_maj_at_k(probs: Sequence[float], optimal: Sequence[bool], k: int) -> float:
    """maj@k by enumerating all n^k sample sequences (tiny n and k only): the plain reference."""
    import itertools
    from collections import Counter

    total = 0.0
    for draw in itertools.product(range(len(probs)), repeat=k):
        weight = math.prod(probs[i] for i in draw)
        counts = Counter(draw)
        best = max(counts.values())
        leaders = [i for i, m in counts.items() if m == best]
        total += weight * sum(optimal[i] for i in leaders) / len(leaders)
    return total


MC_TRIALS = 4096
"""Sets of k samples per prompt when the response space is too large to enumerate."""


class MonteCarloWarning(UserWarning):
    """The value is a Monte Carlo estimate, not exact: the response space is past the enumeration limit."""


def _as_ks(k: int | Sequence[int]) -> tuple[list[int], bool]:
    ks = [k] if isinstance(k, (int, float)) else list(k) if isinstance(k, Sequence) else [k]
    if not ks or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in ks):
        raise ValueError(f"k must be a positive integer or a list of them, got {k!r}")
    return ks, not isinstance(k, Sequence)


def _sampled_votes(policy, prompts: Tensor, reward, ks: list[int], generator: torch.Generator | None,
                   trials: int, task=None) -> tuple[Tensor, Tensor]:
    """Monte Carlo pass@k and maj@k from `trials` sets of max(ks) samples: two float[batch len(ks)]. The optimum
    is the task's target's reward (`task` None: the lecture's task, whose names a string `reward` is)."""
    import warnings

    from lab.policies.sampling import sample_responses
    from tasks.catalog import default_task

    warnings.warn(f"the response space is past lab.exact.enumeration.LIMITS.max_responses: pass@k and maj@k are Monte "
                  f"Carlo estimates from {trials} sets of samples per prompt", MonteCarloWarning, stacklevel=3)
    task = default_task() if task is None else task
    reward = task.reward_fn(reward) if isinstance(reward, str) else reward
    with torch.no_grad():
        logits = policy(prompts)
    top = max(ks)
    responses = sample_responses(logits, trials * top, generator).unflatten(-2, (trials, top))  # [b t k pos]
    rewards = reward(prompts, responses.flatten(1, 2)).unflatten(-1, (trials, top))  # float[batch trial k]
    targets = task.targets(prompts)  # optimal under every reward of the task (for sorting: sorted(prompt))
    best = reward(prompts, targets.unsqueeze(-2)).squeeze(-1)  # float[batch]
    optimal = rewards >= best[:, None, None] - OPTIMAL_TOLERANCE  # bool[batch trial k]
    same = (responses.unsqueeze(-2) == responses.unsqueeze(-3)).all(dim=-1)  # bool[batch trial k k]
    passes, majs = [], []
    for k in ks:
        counts = same[..., :k, :k].sum(dim=-1)  # votes of each of the first k samples' response
        leader = counts == counts.amax(dim=-1, keepdim=True)
        # each distinct leader appears `max` times, so these are the shares of distinct responses
        majs.append(((leader & optimal[..., :k]).sum(-1) / leader.sum(-1)).double().mean(-1))
        passes.append(optimal[..., :k].any(dim=-1).double().mean(-1))
    return torch.stack(passes, -1), torch.stack(majs, -1)


def _tables(policy, prompts, reward):
    prompts = torch.as_tensor(prompts, dtype=torch.long)
    probs = enumeration.all_probs(policy, prompts, torch.float64).detach()
    table = enumeration.reward_table(prompts, reward, policy.vocab_size, policy.response_length)
    return prompts, probs, table.to(probs)


def pass_at_k(policy, prompts, reward, k: int | Sequence[int], generator: torch.Generator | None = None,
              trials: int = MC_TRIALS, task=None) -> Tensor:
    """P(at least one of k samples is optimal), exactly 1 - (1 - p*)^k per prompt: float[batch]
    (float[batch len(k)] for a list of k). `reward` as in `lab.exact.expected_reward`. Past the
    enumeration limit: a Monte Carlo estimate from `generator`, with a `MonteCarloWarning` (the optimum: `task`'s
    target, the lecture's task by default)."""
    return _at_k(policy, prompts, reward, k, generator, trials, pass_at_k_from_probs, vote=0, task=task)


def maj_at_k(policy, prompts, reward, k: int | Sequence[int], generator: torch.Generator | None = None,
             trials: int = MC_TRIALS, task=None) -> Tensor:
    """P(the plurality vote of k samples is an optimal response; ties broken at random) per prompt:
    float[batch] (float[batch len(k)] for a list of k). Exact by `maj_at_k_from_probs`; past the
    enumeration limit a Monte Carlo estimate from `generator`, with a `MonteCarloWarning`."""
    return _at_k(policy, prompts, reward, k, generator, trials, maj_at_k_from_probs, vote=1, task=task)


def _at_k(policy, prompts, reward, k, generator, trials, exact, vote: int, task=None) -> Tensor:
    """`exact` over the enumerated tables, or entry `vote` (0 pass, 1 maj) of the sampled estimates."""
    ks, single = _as_ks(k)
    # read at call time, so that a caller (a test) can lower the limit
    if policy.vocab_size ** policy.response_length > enumeration.LIMITS.max_responses:
        values = _sampled_votes(policy, torch.as_tensor(prompts), reward, ks, generator, trials, task)[vote]
    else:
        values = exact(*_tables(policy, prompts, reward)[1:], ks)
    return values[..., 0] if single else values
