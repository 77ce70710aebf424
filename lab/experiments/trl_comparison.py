"""The same GRPO settings trained by the lab's autoregressive policy and by TRL's transformer, side by side.

For each setting s (a delta mode and a loss aggregation) and seed k, both learners train on the
lecture's prompts with the same G, steps, lr, clip and reward (`COMPARISON`), and the exact
expected reward J_s,k(e) and sequence entropy H_s,k(e) of each learner's sampling distribution are
taken at checkpoints e by enumerating every response (`lab.exact.varlen` for the lab's policy,
`lab.bridge.exact_lm` for TRL's model; the lab's run of e epochs is exactly the first e epochs of a
longer run with the same seed, so checkpoints are runs of e epochs).

Verdict, for each comparison of two settings a and b that the lab draws conclusions about:

    d_k = J_a,k(E) - J_b,k(E)   (same seed k: paired; 95% paired t interval over seeds)
    category: "a higher" (interval > 0), "a lower" (< 0), "little difference" (inside +-MARGIN,
              5% of the optimum), else "inconclusive"   (each learner's own reading, shown beside the verdict)
    "the lab's conclusion carries over to TRL's trainer" is a question about the interaction, tested directly:
    i_k = (J^TRL_a,k - J^TRL_b,k) - (J^lab_a,k - J^lab_b,k), paired by seed (both learners run seeds 0..N-1);
    `lab.experiments.verdicts.within` +-MARGIN: holds when the interval of mean(i) lies inside, does not hold
    when wholly outside, underpowered when the seeds cannot fit an interval inside the margin (the smallest
    margin the design reaches at 80% power beside it), else inconclusive.

A different network learns at its own pace, so only the direction of a comparison is asked to carry
over, never the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lab.bridge.exact_lm import all_responses, reward_table
from lab.bridge.trl_grpo import TRLGRPO, train_trl
from lab.bridge.tiny_lm import TinyLM
from lab.exact import varlen
from lab.experiments.intervals import Interval, paired_interval
from lab.policies import policy_from_state
from lab.training.config import TrainConfig
from lab.training.train import train
from tasks import Task


@dataclass(frozen=True)
class Comparison:
    """The shared settings (both learners) and what is compared."""

    epochs: int = 100
    group_size: int = 10
    steps: int = 1
    lr: float = 1e-3
    clip_eps: float = 0.2
    reward: str = "inclusion-ordering"
    max_length: int = 4
    checkpoint_every: int = 10
    margin_fraction: float = 0.05
    """'little difference' = within this fraction of the optimum reward"""
    settings: tuple = (("centered", "token-mean"), ("normalized", "token-mean"), ("centered", "seq-mean-token-mean"))
    comparisons: tuple = ((1, 0, "normalized - centered deltas (the lecture: little difference)"),
                          (2, 0, "seq-mean-token-mean - token-mean aggregation"))

    def checkpoints(self) -> list[int]:
        return [1, *range(self.checkpoint_every, self.epochs + 1, self.checkpoint_every)]


COMPARISON = Comparison()


def _reward_entropy(log_probs: torch.Tensor, rewards: torch.Tensor) -> tuple[float, float]:
    probs = log_probs.exp()
    return float((probs * rewards).sum(-1).mean()), float(-(probs * log_probs).sum(-1).mean())


def lab_curves(task: Task, setting: tuple[str, str], seeds: int, comparison: Comparison = COMPARISON) -> np.ndarray:
    """float[2 seed checkpoint]: exact J and H of the lab's autoregressive policy."""
    delta, agg = setting
    rewards = reward_table(task.prompts, all_responses(task.vocab_size, comparison.max_length),
                           task.variable_length_reward(comparison.reward, task.vocab_size))
    out = np.zeros((2, seeds, len(comparison.checkpoints())))
    for c, epochs in enumerate(comparison.checkpoints()):
        configs = [TrainConfig(epochs=epochs, steps=comparison.steps, group_size=comparison.group_size,
                               lr=comparison.lr, seed=seed, delta=delta, loss="clipped", clip_eps=comparison.clip_eps,
                               policy="autoregressive", max_length=comparison.max_length, loss_agg=agg,
                               reward=comparison.reward) for seed in range(seeds)]
        records = train(task, configs)
        for seed in range(seeds):
            with torch.no_grad():
                log_probs = varlen.all_log_probs(policy_from_state(records.state, seed), task.prompts, torch.float64)
            out[:, seed, c] = _reward_entropy(log_probs, rewards)
    return out


def trl_curves(task: Task, setting: tuple[str, str], seeds: int, comparison: Comparison = COMPARISON) -> np.ndarray:
    """float[2 seed checkpoint]: exact J and H of TRL's transformer (`lab.bridge.exact_lm` each epoch)."""
    delta, agg = setting
    out = np.zeros((2, seeds, len(comparison.checkpoints())))
    for seed in range(seeds):
        run = TRLGRPO(epochs=comparison.epochs, steps=comparison.steps, group_size=comparison.group_size,
                      lr=comparison.lr, clip_eps=comparison.clip_eps, delta=delta, loss_agg=agg,
                      reward=comparison.reward, max_length=comparison.max_length, seed=seed,
                      model=TinyLM(vocab_size=task.vocab_size, seed=seed))
        records, _, _ = train_trl(task, run)
        by_epoch = {row["epoch"]: row for row in records}
        for c, epoch in enumerate(comparison.checkpoints()):
            out[:, seed, c] = by_epoch[epoch]["reward_exact"], by_epoch[epoch]["entropy_exact"]
    return out


def category(interval: Interval, margin: float, a: str = "a") -> str:
    if -margin <= interval.low and interval.high <= margin:
        return "little difference"
    if interval.low > 0:
        return f"{a} higher"
    if interval.high < 0:
        return f"{a} lower"
    return "inconclusive"


@dataclass
class ComparisonResult:
    """Both learners' curves per setting: float[2 seed checkpoint] (J, H), and the mean optimum reward."""

    comparison: Comparison
    seeds: int
    lab: list
    trl: list
    optimum: float


def run_comparison(task: Task, seeds: int, comparison: Comparison = COMPARISON, progress=None) -> ComparisonResult:
    """Train every setting with both learners over seeds 0..seeds-1; `progress(done, total)` per setting half."""
    rewards = reward_table(task.prompts, all_responses(task.vocab_size, comparison.max_length),
                           task.variable_length_reward(comparison.reward, task.vocab_size))
    lab, theirs, total = [], [], 2 * len(comparison.settings)
    for i, setting in enumerate(comparison.settings):
        lab.append(lab_curves(task, setting, seeds, comparison))
        progress and progress(2 * i + 1, total)
        theirs.append(trl_curves(task, setting, seeds, comparison))
        progress and progress(2 * i + 2, total)
    return ComparisonResult(comparison, seeds, lab, theirs, float(rewards.amax(-1).mean()))


def comparison_rows(result: ComparisonResult) -> list[dict]:
    """One row per comparison: each learner's paired interval of the final J difference and its category, and the
    interaction's `within` verdict (`interaction`: a `lab.experiments.verdicts.Verdict`; `verdict`: its answer)."""
    from lab.experiments.verdicts import within

    margin = result.comparison.margin_fraction * result.optimum
    rows = []
    for a, b, what in result.comparison.comparisons:
        row = {"comparison": what}
        effect = {}
        for name, curves in (("lab", result.lab), ("trl", result.trl)):
            effect[name] = curves[a][0, :, -1] - curves[b][0, :, -1]  # float[seed]
            interval = paired_interval(curves[a][0, :, -1], curves[b][0, :, -1])
            row[name] = (interval, category(interval, margin))
        row["interaction"] = within(effect["trl"], effect["lab"], margin=margin)
        row["verdict"] = row["interaction"].answer
        rows.append(row)
    return rows
