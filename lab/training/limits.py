"""What a run or sweep will need, checked against what the machine has, before anything is allocated.

    memory(R runs) ~ params * R * (vocab*dim + (P+Q)*dim^2) * 4 B        parameters, gradients, Adam, copies
                   + R * B * G * Q * (vocab + 64 + 2 P) B * steps-in-a-block sampling, the reward's token pairs,
                                                                             log-probs, metric block
                   + R * B * pairs-per-prompt * 2 * P * (vocab + 64) B      offline DPO's fixed pairs
                   + R * E * S * (11 metrics * 8 B + CSV row)            the records and metrics.csv's text
                   + prompts (a Python list while they are drawn)
                   + R * E * B * P * vocab * 4 B                          each epoch's sampling logits (exploration)
                   + R * E' * B * 1024 * P * (2 P + 64) B   past V^P > 4096: the Monte Carlo exploration's responses
                                                            and their rewards (E' epochs at once, lab.exact.exploration)
    autoregressive: Q = max length, one more token (EOS), the (Q x Q) previous-token matrices, the
    metric block's log-softmaxes, and the prefix tree R * B * (1 + V + ... + V^(Q-1)) * (V+1) * 4 B * 8
    (built only within `lab.exact.LIMITS`: the response count is summed only up to that cap, so the
    estimate takes microseconds for any --max-length)

Every term is an over-estimate of the lab's own tensors (float32 values, int64 tokens, a bool
comparison per vocabulary entry while sampling); torch's allocator and Python add some more. A
request past the memory available (`/proc/meminfo`'s MemAvailable, or the free CUDA memory for
what lives on the GPU) is refused with the estimate in the message, so that `--group-size 1e9`
ends in one line instead of an allocation traceback, and `--epochs 10**12` in one line instead
of an endless run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lab.exact.exploration import MC_SAMPLES, mc_epochs_at_once
from lab.training.bounds import capped_power, check_counts
from lab.training.config import ConfigError, TrainConfig
from lab.exact.enumeration import LIMITS
from lab.training.lengths import LENGTH_MARGIN
from lab.training.metrics import METRIC_BLOCK_TOKENS
from lab.policies.interface import PolicyKind
from lab.training.records import EPOCH_METRICS, METRIC_COLUMNS, STEP_METRICS


@dataclass(frozen=True)
class MemoryCosts:
    """Bytes per unit of each term (documented over-estimates; see the module docstring)."""

    parameter_copies: int = 8
    """parameter, gradient, Adam m, v and update, divergence snapshot, reference, returned state"""
    token_bytes: int = 64
    """per sampled token and step: float64 uniform, int64 token, float32 log-probs and their gradient"""
    csv_row_bytes: int = 24 * len(METRIC_COLUMNS)
    """text of one metrics.csv row (about 12 characters per value), built once and joined once"""
    prompt_token_bytes: int = 200
    """one prompt token while Python draws the prompts (int objects, list and set entries)"""
    tree_copies: int = 8
    """the autoregressive prefix tree: the policy's and the reference's levels and their temporaries"""
    reward_pair_bytes: int = 2
    """per (sampled token, prompt token): the reward's bool comparison and its reduction (a task's rewards, as sorting's)"""


COSTS = MemoryCosts()


def available_memory() -> int:
    """Bytes of RAM the process may still take: MemAvailable, else free pages, else unknown (a big number)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def available_device_memory(device: torch.device) -> int:
    """Free bytes on `device` (CUDA: torch.cuda.mem_get_info; the CPU: `available_memory`)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return available_memory()


def gigabytes(n: float) -> str:
    n = min(n, 10**300)  # a float; the counts are bounded before (lab.training.bounds), this never binds
    for unit, size in (("TB", 1e12), ("GB", 1e9)):
        if n >= size / 10:
            return f"{n / size:,.3g} {unit}" if n < 1e15 else f"{n / size:.2e} {unit}"
    return f"{n / 1e6:.3g} MB"


def estimate(configs: Sequence[TrainConfig], vocab_size: int, prompt_count: int, prompt_length: int,
             heldout: int = 0, costs: MemoryCosts = COSTS, seeds: int = 1) -> dict[str, int]:
    """Bytes per term for training `configs` (grouped into batches by group size) and keeping their records.

    Each config stands for `seeds` runs. 'device': tensors that live where training runs;
    'host': records and text, always in RAM.
    """
    runs, B, P = len(configs) * seeds, prompt_count, prompt_length
    if runs == 0:
        return {"device": 0, "host": 0}
    shared = configs[0]
    dim, E, S = shared.dim, shared.epochs, shared.steps
    params = runs * (vocab_size * dim + 2 * P * dim * dim) * 4 * costs.parameter_copies
    # the largest batch's tokens per step; a metric block holds up to METRIC_BLOCK_TOKENS tokens or one epoch
    step_tokens = max(sum(seeds for c in configs if c.group_size == G) * B * G * P
                      for G in {c.group_size for c in configs})
    sampling = step_tokens * (vocab_size + costs.token_bytes)  # one bool per vocabulary entry per token
    sampling += step_tokens * P * costs.reward_pair_bytes  # the reward compares every prompt token with every response token
    pairs = max((c.pairs_per_prompt or 0) for c in configs)
    if pairs:  # offline DPO: the fixed set of pairs, two responses each, and a forward pass over it
        pair_tokens = runs * B * pairs * 2 * P
        sampling += pair_tokens * (vocab_size + costs.token_bytes)
    block_tokens = min(E * S * step_tokens, max(METRIC_BLOCK_TOKENS, step_tokens * S))
    block = block_tokens * costs.token_bytes + block_tokens // max(1, max(c.group_size for c in configs)) \
        * vocab_size * 4 * 2
    rows = runs * E * S
    records = rows * len(STEP_METRICS) * 8 + runs * E * (len(EPOCH_METRICS) * 4 + (B + heldout) * P * 8
                                                         + B * shared.group_size * 4)
    text = rows * costs.csv_row_bytes * 2
    prompts = (B + heldout) * P * costs.prompt_token_bytes
    explored = runs * E * B * P * vocab_size * 4  # each epoch's sampling logits, kept for the exploration metrics
    if shared.policy is PolicyKind.factorized and capped_power(vocab_size, P, LIMITS.max_responses) > \
            LIMITS.max_responses:  # its Monte Carlo estimate: MC_SAMPLES responses a prompt, each reward P x P
        epochs_at_once = mc_epochs_at_once(runs, B, P, vocab_size, E)  # as lab.exact.exploration chunks them
        explored += runs * epochs_at_once * B * MC_SAMPLES * P * (P * costs.reward_pair_bytes + costs.token_bytes)
    block += explored
    if shared.policy is PolicyKind.autoregressive:  # lab.training.kinds.Autoregressive: see its docstrings
        Q = shared.max_length or P + LENGTH_MARGIN
        params += runs * (Q * Q + Q - P) * dim * dim * 4 * costs.parameter_copies
        scale = Q / P  # longer responses: every token term grows
        sampling, block = int(sampling * scale), int(block * scale + block_tokens * scale * (vocab_size + 1) * 4)
        if space_within(vocab_size, Q, LIMITS.max_responses):  # else no tree (lab.exact.ar_exploration)
            prefixes = sum(vocab_size ** q for q in range(Q))
            block += runs * B * prefixes * (vocab_size + 1) * 4 * costs.tree_copies
    return {"device": params + sampling + block, "host": records + text + prompts}


def space_within(vocab_size: int, max_length: int, cap: int) -> bool:
    """`lab.exact.varlen.space_size(V, Q) <= cap`, without the sum of Q big powers: V = 1 in closed form
    (Q + 1 responses), else the terms are added only until the cap is passed (about log_V(cap) of them)."""
    if vocab_size <= 1:
        return max_length + 1 <= cap
    total = 0
    for c in range(max_length + 1):
        total += vocab_size ** c
        if total > cap:
            return False
    return True


def check_memory(configs: Sequence[TrainConfig], vocab_size: int, prompt_count: int, prompt_length: int,
                 heldout: int, device: torch.device, what: str = "this run", seeds: int = 1,
                 advice: str | None = None, seeds_flag: str = "--seeds") -> None:
    """Raise `ConfigError` when the estimate exceeds the memory available (message: estimate, limit, way out).

    Every count is bounded first (`lab.training.bounds.check_counts`, naming its option), so the estimate
    multiplies small numbers. `advice`: what the command's user can lower (default: `lab run` and `lab
    sweep`'s options); `seeds_flag`: the option that counts the runs of each config."""
    host_free = available_memory()
    counts = {f"--{name.replace('_', '-')}": max(getattr(c, name) or 0 for c in configs)
              for name in COUNT_FIELDS} if configs else {}
    check_counts({**counts, "--vocab-size": vocab_size, "--num-prompts": prompt_count,
                  "--prompt-length": prompt_length, "--heldout": heldout, seeds_flag: seeds}, host_free, what)
    need = estimate(configs, vocab_size, prompt_count, prompt_length, heldout, seeds=seeds)
    if device.type == "cuda":
        device_free = available_device_memory(device)
        if need["device"] > device_free:
            raise ConfigError(f"{what} needs about {gigabytes(need['device'])} of GPU memory, more than the "
                              f"{gigabytes(device_free)} free; {advice or _advice()}")
        total = need["host"]
    else:
        total = need["host"] + need["device"]
    if total > host_free:
        raise ConfigError(f"{what} needs about {gigabytes(total)} of memory, more than the "
                          f"{gigabytes(host_free)} available; {advice or _advice()}")


COUNT_FIELDS = ("epochs", "steps", "group_size", "dim", "max_length", "pairs_per_prompt")
"""TrainConfig fields that count units of memory (each bounded by `check_counts` before the estimate)."""


def _advice() -> str:
    return ("lower --group-size, --dim, --vocab-size, the number of prompts, --epochs x --steps "
            "(the records keep every step), --max-length (autoregressive) or the number of runs")


def cpu_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_threads(threads: int | None, flag: str = "--threads") -> None:
    """`threads` must lie in 1..cores (torch segfaults on absurd counts)."""
    cores = cpu_cores()
    if threads is not None and not 1 <= threads <= cores:
        raise ConfigError(f"{flag} must be from 1 to {cores} (this machine's cores), got {threads}")
