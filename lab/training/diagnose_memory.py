"""What `lab diagnose` will need, checked against what the machine has, before anything is allocated.

    bytes ~ B * n * (params + n) * 8 * 2 + chunk * G_max * B * Q * (V + 24) + chunk * B * n * 8
            n = V^Q responses (multiplied out only up to `RESPONSE_CAP`), params = V*dim + (P+Q)*dim^2

the score and Gram matrices of the exact analysis and a Monte Carlo chunk (`diagnose_bytes`).
"""

from __future__ import annotations

from collections.abc import Sequence

from lab.training.bounds import capped_power, check_counts
from lab.training.config import ConfigError
from lab.training.limits import available_memory, gigabytes

RESPONSE_CAP = 1 << 62
"""Responses counted at most in `diagnose_bytes` (vocab^length is multiplied out only this far)."""


def diagnose_bytes(vocab_size: int, prompt_count: int, prompt_length: int, response_length: int, dim: int,
                   group_sizes: Sequence[int], monte_carlo_chunk: int = 2_000) -> int:
    """`lab diagnose`'s largest arrays: the score matrix float64[batch n params] (n = vocab^Q responses),
    the Gram matrix float64[batch n n], and a Monte Carlo chunk of sampled groups for the largest G."""
    n = capped_power(vocab_size, response_length, RESPONSE_CAP)  # past the cap the estimate refuses anyway
    params = vocab_size * dim + (prompt_length + response_length) * dim * dim
    exact = prompt_count * n * (params + n) * 8 * 2
    sampled = monte_carlo_chunk * max(group_sizes) * prompt_count * response_length * (vocab_size + 24) \
        + monte_carlo_chunk * prompt_count * n * 8
    return exact + sampled


def check_diagnose_memory(dim: int, task, group_sizes: Sequence[int]) -> None:
    """Refuse a diagnosis whose arrays (`diagnose_bytes`) exceed the memory available."""
    free = available_memory()
    check_counts({"--dim": dim, "--group-size": max(group_sizes), "--vocab-size": task.vocab_size},
                 free, "this diagnosis")
    need = diagnose_bytes(task.vocab_size, task.prompts.shape[0], task.prompts.shape[1], task.response_length,
                          dim, group_sizes)
    if need > free:
        about = "more than" if capped_power(task.vocab_size, task.response_length, RESPONSE_CAP) > RESPONSE_CAP \
            else "about"  # past the cap the estimate is a lower bound
        raise ConfigError(f"this diagnosis needs {about} {gigabytes(need)} of memory and {gigabytes(free)} are "
                          f"available; lower --dim or the largest --group-size ({max(group_sizes)}), or use fewer "
                          "or shorter prompts (it enumerates vocab^length responses)")
