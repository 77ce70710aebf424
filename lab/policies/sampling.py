"""Sampling responses from the factorised policy's logits, and scoring their log-probabilities.

    y_{t,q} ~ softmax(logits_q)      independently for every trial t and position q
    log_probs[t, q] = log softmax(logits_q)[y_{t,q}]
    log pi(y_t | x) = sum_q log_probs[t, q]

Logits do not depend on the trial (the policy sees only the prompt), so they are
computed once per prompt, `float[... batch pos vocab]`, and broadcast over `trial`.

How a run's generator turns logits into responses (`Sampler`):

    inverse-cdf:  y_{t,q} = #{v : cdf_q[v] <= u_{t,q}},   u_{t,q} ~ U[0, 1) in float64, one per (batch trial pos)
    multinomial:  y[(batch pos), :] = torch.multinomial(softmax(logits[(batch pos), :]), G, replacement=True)

Both draw every position independently from softmax(logits_q), so both sample the
same distribution; they consume the generator differently, so the same seed gives
different responses. `inverse-cdf` (`lab.policies.sampling.sample_responses`) is the lab's
default. `multinomial` is exactly the call of the CS336 lecture-17 script's
`generate_responses`: the logits flattened to `(batch pos) vocab`, G draws per row
with replacement, reshaped to `batch trial pos`. The script seeds the global RNG
(`torch.manual_seed(5)`), initialises its model (embedding, encode, decode: the
order `lab.policies.factorized.init_parameters` draws in) and then samples from the same stream;
the lab does the same with the run's own generator, so on the CPU
`TrainConfig(seed=5, sampler="multinomial")` draws the script's samples and
reproduces its committed seed-5 logs (tests/experiments/test_lecture_run.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lab.core.modes import Sampler


def sample_responses(
    logits: Tensor,
    num_trials: int,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
) -> Tensor:
    """Draw `num_trials` responses per prompt.

    logits float[... batch pos vocab] -> responses int[... batch trial pos].

    Inverse-CDF sampling: one uniform per (batch, trial, pos). With a list of
    generators, logits are float[run batch pos vocab] and run r's uniforms come from
    `generator[r]` alone, so a run samples the same responses whether it is drawn
    alone or inside a sweep.
    """
    *lead, batch, pos, vocab = logits.shape
    shape = (batch, num_trials, pos)
    options = dict(device=logits.device, dtype=torch.float64)
    if isinstance(generator, Sequence):
        if len(generator) != logits.shape[0]:
            raise ValueError(f"got {len(generator)} generators for {logits.shape[0]} runs")
        # each run's uniforms from its own generator, written in place (what torch.rand draws, with no
        # per-run tensor to stack: 0.15 s CPU instead of 0.24 s for 500 runs x 100 epochs, busy machine)
        uniforms = torch.empty(len(generator), *shape, **options)
        for run_uniforms, g in zip(uniforms, generator):
            run_uniforms.uniform_(generator=g)
    else:
        uniforms = torch.rand(*lead, *shape, generator=generator, **options)
    # double precision keeps the CDF exact enough that ties with u are negligible
    cdf = torch.softmax(logits.detach().double(), dim=-1).cumsum(dim=-1)  # float[... batch pos vocab]
    # the sampled token is the number of CDF steps at or below u
    below = (cdf.unsqueeze(-3) <= uniforms.unsqueeze(-1)).sum(dim=-1)  # int[... batch trial pos]
    return below.clamp(max=vocab - 1)  # u can pass cdf[-1] only by rounding


def log_softmax(logits: Tensor) -> Tensor:
    """log softmax over vocab, as logits - logsumexp(logits): float[... vocab] -> float[... vocab].

    The same numbers as torch.log_softmax, but for a vocabulary this small its
    fused kernel is slower than the two-step form (about 2x, forward and backward).
    """
    return logits - torch.logsumexp(logits, dim=-1, keepdim=True)


def response_log_probs(logits: Tensor, responses: Tensor) -> Tensor:
    """Per-position log-probs of given responses.

    logits float[... batch pos vocab], responses int[... batch trial pos] -> float[... batch trial pos].
    """
    return gather_log_probs(log_softmax(logits), responses)


def gather_log_probs(log_softmax: Tensor, responses: Tensor) -> Tensor:
    """`response_log_probs` from precomputed log-softmaxes float[... batch pos vocab] (reused by the loop)."""
    # gather along vocab with the trials as the index axis: no [trial vocab] copy of log_softmax
    # exists, and the backward scatters into float[... batch pos vocab] directly
    index = responses.transpose(-1, -2)  # int[... batch pos trial]
    if log_softmax.shape[:-2] != index.shape[:-2]:  # gather does not broadcast leading axes
        lead = torch.broadcast_shapes(log_softmax.shape[:-2], index.shape[:-2])
        log_softmax = log_softmax.expand(*lead, *log_softmax.shape[-2:])
        index = index.expand(*lead, *index.shape[-2:])
    by_position = log_softmax.gather(-1, index)  # float[... batch pos trial]
    return by_position.transpose(-1, -2)


def sequence_log_probs(logits: Tensor, responses: Tensor) -> Tensor:
    """log pi(y | x) = sum over positions: float[... batch trial]."""
    return response_log_probs(logits, responses).sum(dim=-1)


def greedy_responses(logits: Tensor) -> Tensor:
    """The argmax response of every prompt: float[... batch pos vocab] -> int[... batch pos]."""
    return logits.argmax(dim=-1)


def entropy(logits: Tensor) -> Tensor:
    """Per-position policy entropy in nats: float[... batch pos vocab] -> float[... batch pos]."""
    return entropy_from_log_softmax(log_softmax(logits))


def entropy_from_log_softmax(log_softmax: Tensor) -> Tensor:
    """`entropy` from precomputed log-softmaxes float[... batch pos vocab] -> float[... batch pos]."""
    return -(log_softmax.exp() * log_softmax).sum(dim=-1)


def sample_multinomial(
    logits: Tensor,
    num_trials: int,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
) -> Tensor:
    """Draw `num_trials` responses per prompt as the lecture's script does.

    logits float[... batch pos vocab] -> responses int[... batch trial pos].

    With a list of generators, logits are float[run batch pos vocab] and run r draws
    from `generator[r]` alone, one `torch.multinomial` call per run: a run samples
    the same responses alone or inside a sweep.
    """
    if isinstance(generator, Sequence):
        if len(generator) != logits.shape[0]:
            raise ValueError(f"got {len(generator)} generators for {logits.shape[0]} runs")
        return torch.stack([sample_multinomial(run_logits, num_trials, g) for run_logits, g in zip(logits, generator)])
    *lead, batch, pos, vocab = logits.shape
    # the script's softmax in the logits' own precision (float32); multinomial renormalises each row
    probs = torch.softmax(logits.detach().reshape(-1, vocab), dim=-1)  # float[(... batch pos) vocab]
    flat = torch.multinomial(probs, num_trials, replacement=True, generator=generator)  # int[(... batch pos) trial]
    return flat.reshape(*lead, batch, pos, num_trials).transpose(-1, -2)


SAMPLERS = {
    Sampler.inverse_cdf: sample_responses,
    Sampler.multinomial: sample_multinomial,
}
"""Sampler -> fn(logits float[... batch pos vocab], num_trials, generator(s)) -> int[... batch trial pos]."""


def draw(sampler: Sampler | str, logits: Tensor, num_trials: int,
         generator: torch.Generator | Sequence[torch.Generator] | None = None) -> Tensor:
    """Responses int[... batch trial pos] drawn with `sampler` (a `Sampler` or its name)."""
    return SAMPLERS[Sampler(sampler)](logits, num_trials, generator)
