"""How a run's generator turns the policy into sampled responses: the lab's draw or the lecture script's.

    inverse-cdf:  y_{t,q} = #{v : cdf_q[v] <= u_{t,q}},   u_{t,q} ~ U[0, 1) in float64, one per (batch trial pos)
    multinomial:  y[(batch pos), :] = torch.multinomial(softmax(logits[(batch pos), :]), G, replacement=True)

Both draw every position independently from softmax(logits_q), so both sample the
same distribution; they consume the generator differently, so the same seed gives
different responses. `inverse-cdf` (`lab.policies.rollout.sample_responses`) is the lab's
default. `multinomial` is exactly the call of the CS336 lecture-17 script's
`generate_responses`: the logits flattened to `(batch pos) vocab`, G draws per row
with replacement, reshaped to `batch trial pos`. The script seeds the global RNG
(`torch.manual_seed(5)`), initialises its model (embedding, encode, decode: the
order `lab.policies.factorized.init_parameters` draws in) and then samples from the same stream;
the lab does the same with the run's own generator, so on the CPU
`TrainConfig(seed=5, sampler="multinomial")` draws the script's samples and
reproduces its committed seed-5 logs (tests/test_lecture_run.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import torch
from torch import Tensor

from lab.policies.rollout import sample_responses


class Sampler(str, Enum):
    inverse_cdf = "inverse-cdf"
    multinomial = "multinomial"


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
