"""How much the sampling policy explores, exactly: P(one response is optimal), P(a group has no signal).

    pi(y | x)     = prod_q p_q(y_q | x)                        every response y of the V^L (lab.exact order)
    optimal_prob  = mean_b  sum_y pi(y | x_b) [R(x_b, y) >= R*(x_b)]
    zero_std_prob = mean_b  sum_v P_b(R = v)^G,   P_b(R = v) = sum_y pi(y | x_b) [R(x_b, y) = v]
    entropy_bonus = mean over (batch, pos) of  -sum_v p_q(v) log p_q(v)     (exact, per run)

`zero_std_prob` is the probability that all G rewards of a group are equal, so that every
group-relative delta is 0 and the prompt gives no update: what `zero_std_fraction` estimates
from the epoch's actual groups. Both are computed from each epoch's sampling logits, for all
epochs at once after the training loop (in the run's dtype: float32 has a relative error ~1e-6, the precision
metrics.csv keeps; a float64 run's are exact to float64 before metrics.csv rounds them to float32).
Past `lab.exact.LIMITS.max_responses` responses they are Monte Carlo estimates instead
(`MC_SAMPLES` responses per prompt and epoch, unbiased: the fraction optimal, and
sum_v C(n_v, G) / C(M, G) for the all-equal probability), and `is_exact` says which.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lab.exact.enumeration import LIMITS
from lab.policies.sampling import entropy, log_softmax, sample_responses
from tasks import OPTIMAL_TOLERANCE

MC_SAMPLES = 1024
"""Responses per prompt and epoch of the Monte Carlo fallback."""
CHUNK_ENTRIES = 2**22
"""Entries built at once (runs x epochs x prompts x responses, or for the Monte Carlo estimate `mc_entries`):
memory stays at tens of MB whatever the sweep's size, until one epoch alone is larger."""


def mc_entries(runs: int, batch: int, length: int, vocab: int) -> int:
    """Entries of one epoch's Monte Carlo estimate: each of the MC_SAMPLES responses of a prompt has `length` tokens,
    each drawn over `vocab` entries and compared by the reward with each of the prompt's `length` tokens (as sorting's
    rewards do: the largest term, P^2 per response)."""
    return runs * batch * MC_SAMPLES * length * (vocab + length)


def mc_epochs_at_once(runs: int, batch: int, length: int, vocab: int, epochs: int) -> int:
    """Epochs of the Monte Carlo estimate taken in one chunk (at least one): `CHUNK_ENTRIES` entries or one epoch."""
    return min(epochs, max(1, CHUNK_ENTRIES // mc_entries(runs, batch, length, vocab)))


def is_exact(vocab_size: int, length: int) -> bool:
    """Whether the response space V^L is small enough to enumerate."""
    return vocab_size ** length <= LIMITS.max_responses


def entropy_bonus(logits: Tensor) -> Tensor:
    """Mean per-position entropy on the prompts, exact and differentiable: float[... batch pos vocab] -> float[...]."""
    return entropy(logits).mean(dim=(-2, -1))


def response_probs(position_log_probs: Tensor) -> Tensor:
    """pi(y | x) of every response from per-position log-probs: float[... pos vocab] -> float[... n].

    Responses in `lab.exact.all_responses` order (position 0 most significant): an outer product
    of the positions' distributions, built one position at a time.
    """
    probs = position_log_probs.exp()
    joint = probs[..., 0, :]
    for q in range(1, probs.shape[-2]):
        joint = (joint.unsqueeze(-1) * probs[..., q, None, :]).flatten(-2)
    return joint


def value_index(table: Tensor) -> tuple[Tensor, int]:
    """Each response's reward as an index into its prompt's sorted distinct values: int[batch n] from float[batch n],
    and the most distinct values any prompt has."""
    index = torch.stack([torch.unique(row, return_inverse=True)[1] for row in table])
    return index, int(index.max()) + 1


def value_indicators(table: Tensor) -> Tensor:
    """[R(x_b, y) = v] for each prompt's distinct reward values: float[batch n] -> float[batch n values].

    Prompts with fewer distinct values are padded with all-zero columns (they add P = 0).
    """
    index, width = value_index(table)
    return torch.nn.functional.one_hot(index, width).to(table.dtype)


def exact_exploration(position_log_probs: Tensor, table: Tensor, optimum: Tensor,
                      group_size: int) -> tuple[Tensor, Tensor]:
    """Per-prompt P(optimal) and P(all G rewards equal), exactly: two float[... batch].

    position_log_probs float[... batch pos vocab], table float[batch n] (R of every response),
    optimum float[batch]. The plain version is `response_probs` times the indicator columns.
    """
    *lead, batch, length, vocab = position_log_probs.shape
    optimal = (table >= optimum.unsqueeze(-1) - OPTIMAL_TOLERANCE).to(position_log_probs)  # float[batch n]
    # indicator columns per prompt: [R optimal], then [R = v] for each value v: float[batch n k]
    columns = torch.cat([optimal.unsqueeze(-1), value_indicators(table).to(optimal)], dim=-1)
    k = columns.shape[-1]
    log_probs = position_log_probs.movedim(-3, 0).reshape(batch, -1, length, vocab)  # float[batch rows pos vocab]
    # sum_y pi(y) col(y) without the V^L table: the first L-1 positions' joint (V^(L-1) entries) meets
    # the columns in one matmul per prompt, then the last position is summed out (3x less memory traffic)
    head = response_probs(log_probs[..., :-1, :]) if length > 1 else log_probs.new_ones(*log_probs.shape[:2], 1)
    partial = (head @ columns.reshape(batch, -1, vocab * k)).unflatten(-1, (vocab, k))  # float[batch rows vocab k]
    sums = (partial * log_probs[..., -1, :, None].exp()).sum(dim=-2)  # float[batch rows k]
    sums = sums.reshape(batch, *lead, k).movedim(0, -2)  # float[... batch k]
    return sums[..., 0], sums[..., 1:].pow(group_size).sum(dim=-1)


def monte_carlo_exploration(logits: Tensor, prompts: Tensor, reward: Callable[[Tensor, Tensor], Tensor],
                            optimum: Tensor, group_size: int, generators: list[torch.Generator],
                            samples: int = MC_SAMPLES) -> tuple[Tensor, Tensor]:
    """Unbiased estimates of the same two quantities from `samples` responses: two float[run epoch batch].

    logits float[run epoch batch pos vocab]; run r draws from `generators[r]` (not its training generator).
    """
    runs, epochs, batch = logits.shape[:3]
    responses = sample_responses(logits.flatten(1, 2), samples, generators)  # int[run (epoch batch) M pos]
    responses = responses.unflatten(1, (epochs, batch))
    rewards = reward(prompts, responses)  # float[run epoch batch M]
    optimal_prob = (rewards >= optimum[:, None] - OPTIMAL_TOLERANCE).double().mean(dim=-1)
    ordered = rewards.sort(dim=-1).values.contiguous()
    # n_v for the value of each sample, by binary search in the sorted rewards
    count = (torch.searchsorted(ordered, ordered, right=True) - torch.searchsorted(ordered, ordered)).double()
    # C(n, G) / C(M, G) = prod_i (n - i) / (M - i): the chance that G draws without replacement all equal v
    ratio = torch.ones_like(count)
    for i in range(group_size):
        ratio = ratio * ((count - i).clamp_min(0) / max(samples - i, 1))
    zero_std_prob = (ratio / count).sum(dim=-1)  # each value's n_v samples share its term
    return optimal_prob, zero_std_prob


def epoch_exploration(logits: Tensor, prompts: Tensor, reward: Callable[[Tensor, Tensor], Tensor],
                      optimum: Tensor, group_size: int,
                      generators: list[torch.Generator] | None = None) -> dict[str, Tensor]:
    """`optimal_prob` and `zero_std_prob` of every run and epoch, means over prompts: float[run epoch] each.

    logits float[run epoch batch pos vocab] are each epoch's sampling logits, prompts int[batch pos],
    optimum float[batch] (of the one reward these runs share). Exact when the space is enumerable,
    else Monte Carlo from `generators` (one per run; required then).
    """
    runs, epochs, batch, length, vocab = logits.shape
    if not is_exact(vocab, length):
        if generators is None:
            raise ValueError("a Monte Carlo estimate needs one generator per run")
        step = mc_epochs_at_once(runs, batch, length, vocab, epochs)
        parts = [monte_carlo_exploration(logits[:, start:start + step], prompts, reward, optimum, group_size,
                                         generators) for start in range(0, epochs, step)]
        optimal, zero = (torch.cat([part[i] for part in parts], 1) for i in range(2))
        return dict(optimal_prob=optimal.mean(-1), zero_std_prob=zero.mean(-1))
    from lab.exact.enumeration import all_responses

    responses = all_responses(vocab, length).to(prompts.device)
    table = reward(prompts, responses.expand(batch, *responses.shape))  # float[batch n]
    step = max(1, CHUNK_ENTRIES // (runs * batch * len(responses)))  # epochs per chunk
    optimal, zero = [], []
    for start in range(0, epochs, step):
        # in the logits' own dtype, at least float32: a float64 run's metrics are exact to float64
        dtype = torch.promote_types(logits.dtype, torch.float32)
        o, z = exact_exploration(log_softmax(logits[:, start:start + step].to(dtype)), table.to(dtype),
                                 optimum.to(dtype), group_size)
        optimal.append(o)
        zero.append(z)
    return dict(optimal_prob=torch.cat(optimal, 1).mean(-1), zero_std_prob=torch.cat(zero, 1).mean(-1))
