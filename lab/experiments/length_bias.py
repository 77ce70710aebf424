"""The length-bias experiment: does 1/|o| normalisation lengthen wrong responses in training?

    settings  = {seq-mean-token-mean, token-mean, seq-mean-token-sum-norm} x {normalized, centered}
                on the autoregressive policy, the lecture's prompts and schedule, seeds 0..N-1
    late(m)   = mean over the last LATE_EPOCHS epochs of a run's metric m (epochs without such samples skipped)
    verdict   = Welch 95% interval of late(incorrect_length) under seq-mean-token-mean minus under
                seq-mean-token-sum-norm, per delta mode: above 0 -> "holds", below 0 -> "does not hold",
                else "inconclusive"

Dr. GRPO (Liu et al. 2025) argue that the GRPO paper's 1/|o| makes wrong responses longer; claims
19-20 (tests/proofs) show the bias of the expected update exactly, and this experiment asks whether
it shows in the toy's training runs. Pure: the runs come from `lab.experiments.sweep.run_sweep`, the text from
the records; the figure is `lab.experiments.figures.plot_length_bias`.
"""

from __future__ import annotations

import warnings

import numpy as np

from lab.training.config import TrainConfig
from lab.experiments.intervals import difference_interval, mean_interval, wilson_interval
from lab.training.records import Records
from lab.experiments.sweep import optimal_everywhere

AGGREGATIONS = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm")
DELTAS = ("normalized", "centered")
SETTINGS = tuple({"policy": "autoregressive", "loss_agg": a, "delta": d} for d in DELTAS for a in AGGREGATIONS)
NAMES = ("loss_agg", "delta")
LATE_EPOCHS = 10
"""'Late in training': the last this many epochs."""
BIASED, UNBIASED = "seq-mean-token-mean", "seq-mean-token-sum-norm"


def length_configs(seeds: int, base: TrainConfig) -> tuple[list[TrainConfig], list[list[int]]]:
    """Every run of the experiment and, per setting, its run indices in seed order."""
    configs = [base.replace(**overrides, seed=seed) for overrides in SETTINGS for seed in range(seeds)]
    return configs, [list(range(i * seeds, (i + 1) * seeds)) for i in range(len(SETTINGS))]


def late(records: Records, metric: str) -> np.ndarray:
    """float[run]: the metric's mean over the last LATE_EPOCHS epochs, NaN where every one is empty."""
    with warnings.catch_warnings():  # an all-NaN run is reported as missing, not warned about
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(records.epoch_metrics[metric][:, -LATE_EPOCHS:], axis=1)


def _t(values: np.ndarray) -> str:
    present = values[~np.isnan(values)]
    return "-" if len(present) == 0 else f"{mean_interval(present).text(2)} (n={len(present)})"


def length_bias_markdown(records: Records, groups: list[list[int]]) -> list[str]:
    """The RESULTS.md section: per-setting lengths and rewards, then the verdict per delta mode."""
    wrong, right = late(records, "incorrect_length"), late(records, "correct_length")
    final, optimal = records.final("mean_reward"), optimal_everywhere(records)
    config = records.configs[groups[0][0]]
    lines = ["| setting | incorrect length, last epochs [95% t] | correct length, last epochs [95% t] | "
             "final mean reward [95% t] | optimal on every prompt [95% Wilson] |", "| --- | --- | --- | --- | --- |"]
    for overrides, runs in zip(SETTINGS, groups):
        success = wilson_interval(int(optimal[runs].sum()), len(runs))
        lines.append(f"| loss_agg={overrides['loss_agg']}, delta={overrides['delta']} | {_t(wrong[runs])} | "
                     f"{_t(right[runs])} | {mean_interval(final[runs]).text(3)} | "
                     f"{success.estimate:.0%} [{success.low:.0%}, {success.high:.0%}] |")
    lines += ["", "| Dr. GRPO says | decided by | 95% interval | verdict |", "| --- | --- | --- | --- |"]
    for delta in DELTAS:
        runs_of = {o["loss_agg"]: runs for o, runs in zip(SETTINGS, groups) if o["delta"] == delta}
        a, b = wrong[runs_of[BIASED]], wrong[runs_of[UNBIASED]]
        a, b = a[~np.isnan(a)], b[~np.isnan(b)]
        if min(len(a), len(b)) < 2:
            numbers, verdict = "too few runs with wrong samples", "inconclusive"
        else:
            diff = difference_interval(a, b)
            numbers = diff.text(2)
            verdict = "holds" if diff.low > 0 else "does not hold" if diff.high < 0 else "inconclusive"
        lines.append(f"| 1/\\|o\\| normalisation lengthens wrong responses ({delta} deltas) | late incorrect length, "
                     f"{BIASED} - {UNBIASED}, above 0 | {numbers} | **{verdict}** |")
    lines += ["", f"Autoregressive policy, cap {config.max_length or 'prompt length + 2'} tokens with EOS, "
              f"{config.epochs} epochs x {config.steps} steps, G = {config.group_size}. Lengths count EOS; "
              f"'last epochs' = the last {LATE_EPOCHS}, skipping epochs without such samples (n = runs with any). "
              "A correct response is sorted(prompt) followed by EOS, so its length is fixed (prompt length + 1): "
              "in this task only wrong responses can change length. The exact expected updates behind the claim: "
              "claims 19-20 in `tests/proofs`."]
    return lines
