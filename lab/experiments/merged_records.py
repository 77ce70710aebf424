"""The records of a sweep's batches as one `Records`, its runs in the sweep's order.

    merged[i] = parts[p].records[r]   where run i of the sweep is run r of batch p

A sweep trains each batch of compatible runs as one computation (`lab.experiments.sweep.batches`); a batch whose runs
all diverged stops early, and its missing epochs are NaN here. Per-epoch samples are dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from lab.training.records import Records


def merge_records(parts: Sequence[tuple[list[int], Records]], order: int) -> Records:
    """Records of several batches as one, with runs in the original config order.

    `parts` are (run indices in the sweep, that batch's records); `order` is the number of runs.
    Per-epoch samples are dropped (their trial axis differs between group sizes). A batch whose
    runs all diverged stops early; its missing records are NaN.
    """
    if len(parts) == 1 and list(parts[0][0]) == list(range(order)):  # one batch, in order: nothing to copy
        return dataclasses.replace(parts[0][1], samples=[])
    # several batches: the critics' final states (`critic_state`) are not merged
    where = np.empty(order, dtype=int)
    flat = [(i, part, r) for part, (indices, _) in enumerate(parts) for r, i in enumerate(indices)]
    for position, (i, _, _) in enumerate(flat):
        where[i] = position
    cat = lambda get: np.concatenate([get(rec) for _, rec in parts])[where]  # noqa: E731

    def cat_padded(get) -> np.ndarray:  # float[run time], NaN past a batch that stopped early
        width = max(get(rec).shape[1] for _, rec in parts)
        return cat(lambda rec: np.pad(get(rec), ((0, 0), (0, width - get(rec).shape[1])),
                                      constant_values=np.nan))

    first = parts[0][1]
    critics = [rec.parameters.get("critic") for _, rec in parts if rec.parameters.get("critic") is not None]

    def table(get) -> dict[str, np.ndarray]:
        """Every metric any batch holds (a DPO or critic batch has its own); NaN for the runs of a batch without it."""
        names = list(dict.fromkeys(k for _, rec in parts for k in get(rec)))
        missing = lambda rec: np.full((rec.num_runs, next(iter(get(rec).values())).shape[1]), np.nan,  # noqa: E731
                                       dtype=np.float32)
        return {k: cat_padded(lambda rec: get(rec)[k] if k in get(rec) else missing(rec)) for k in names}

    return Records(
        configs=[parts[p][1].configs[r] for _, p, r in sorted(flat)],
        prompts=first.prompts,
        optimum=cat(lambda rec: rec.optimum),
        step_metrics=table(lambda rec: rec.step_metrics),
        epoch_metrics=table(lambda rec: rec.epoch_metrics),
        samples=[],
        state={k: torch.from_numpy(cat(lambda rec: rec.state[k].numpy())) for k in first.state},
        greedy_responses=cat(lambda rec: rec.greedy_responses),
        seconds=sum(rec.seconds for _, rec in parts),
        exploration_exact=all(rec.exploration_exact for _, rec in parts),
        eos=first.eos,
        divergence=[parts[p][1].divergence[r] for _, p, r in sorted(flat)],
        parameters={"policy": first.parameters.get("policy"), "critic": critics[0] if critics else None},
    )
