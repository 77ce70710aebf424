"""Where runs end: stuck endings, and whether a single token would improve them.

    R_rb        = R(x_b, y_rb)                          y_rb: run r's final greedy response to prompt b
    stuck       = R_rb < R*(x_b) - tol                  (R*: the prompt's optimum; tol: tasks.OPTIMAL_TOLERANCE)
    improvable  = stuck and max_{q, v} R(x_b, y_rb with y_q := v) > R_rb
    local opt.  = stuck and not improvable              (no single-token change raises the reward)

"Stuck in a local optimum" is a statement about the reward landscape, "not optimal" is not: a
run can end one token away from a better response and still not move, because its policy is so
sure of y_rb that every sample of a group is scored alike and centered deltas are exactly zero.
This module tells the two apart for `figures/RESULTS.md` (`lab.experiments.results`, through
`lab.experiments.sweep.final_endings`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch import Tensor

from tasks import OPTIMAL_TOLERANCE, neighbour_rewards


@dataclass(frozen=True)
class Endings:
    """The final greedy responses of some runs, judged per (run, prompt): bool[run batch] each."""

    stuck: np.ndarray
    """the response's reward is below the prompt's optimum"""
    improvable: np.ndarray
    """stuck, and some single-token change raises the reward"""

    @property
    def local_optimum(self) -> np.ndarray:
        """stuck, and no single-token change raises the reward (ties allowed: flat local optima count)"""
        return self.stuck & ~self.improvable

    @property
    def sorted_share(self) -> np.ndarray:
        """float[run]: the share of prompts on which the run ends optimal"""
        return (~self.stuck).mean(axis=-1)

    def local_optimum_share(self) -> np.ndarray:
        """float[run]: among a run's stuck endings, the share that are local optima (runs with a stuck ending only)"""
        stuck_runs = self.stuck.any(axis=-1)
        return self.local_optimum[stuck_runs].sum(axis=-1) / self.stuck[stuck_runs].sum(axis=-1)


def judge_endings(reward, prompts: Tensor, greedy: Tensor, optimum: Tensor, vocab_size: int) -> Endings:
    """Judge final greedy responses, greedy int[run batch pos], on prompts int[batch pos] whose optimum
    is float[run batch], under `reward`: a vectorized reward function, or a name of the lecture's task's rewards."""
    if isinstance(reward, str):
        from tasks.catalog import default_task

        reward = default_task().reward_fn(reward)
    own = reward(prompts, greedy.unsqueeze(-2)).squeeze(-1).double()  # float[run batch]
    best_change = neighbour_rewards(reward, prompts, greedy, vocab_size).amax(dim=(-2, -1)).double()
    stuck = own < optimum.double() - OPTIMAL_TOLERANCE
    return Endings(stuck=stuck.numpy(), improvable=(stuck & (best_change > own)).numpy())
