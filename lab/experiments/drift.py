"""How far each trained run moved: the exact KL of its final policy from its initial one.

    drift_r = mean over training prompts x of KL(pi_final_r(. | x) || pi_initial_r(. | x))

summed over response positions (`lab.exact.sequence_kl`), so it is per response. The initial
policy is rebuilt from the run's seed exactly as `lab.training.train` builds it by default (a
`torch.Generator` seeded with `config.seed`); for a frozen reference (`kl_period = 0`) it is
the reference itself, so this is the drift the KL penalty was meant to bound, measured
without the heavy tail of the logged k3 estimate.
"""

from __future__ import annotations

import numpy as np
import torch

from lab.training.config import TrainConfig
from lab.exact.enumeration import sequence_kl
from lab.policies.factorized import Policy
from lab.policies import policy_from_state
from lab.training.records import Records
from tasks import Task


def initial_policy(task: Task, config: TrainConfig) -> Policy:
    """The policy a run of `config` starts from (that of `lab.training.train` with its default generators)."""
    return Policy(task.vocab_size, task.prompts.shape[1], task.response_length, config.dim,
                  generator=torch.Generator().manual_seed(config.seed))


def drift_from_start(task: Task, records: Records, dtype: torch.dtype = torch.float64) -> np.ndarray:
    """Exact KL(pi_final || pi_initial) per response, averaged over `task`'s prompts: float[run].

    `records` must come from `lab.training.train` (or a sweep) on `task` with its default generators.
    """
    drifts = []
    for run, config in enumerate(records.configs):
        final = policy_from_state(records.state, run)
        with torch.no_grad():
            kl = sequence_kl(final, initial_policy(task, config), task.prompts, dtype)
        drifts.append(kl.mean().item())
    return np.array(drifts)
