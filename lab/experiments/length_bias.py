"""The length-bias experiment: does 1/|o| normalisation move wrong responses' length in training? (Dr. GRPO)

    settings   = {raw, centered, normalized} deltas x init scale {1, 0.1} on the autoregressive policy with the
                 lecture's prompts, reward (inclusion-ordering, variable length) and schedule; and Dr. GRPO's own
                 setting, a 0/1 reward on a task the policy can solve (DR_GRPO: exact-match, prompts [[0],[1]] over
                 vocabulary 2, cap 6, init scale 0.1, centered). Each setting runs seeds 0..N-1 under both divisors:
                 1/|o| (seq-mean-token-mean) and the constant C (seq-mean-token-sum-norm), so runs pair by seed.
    diff_s(e)  = incorrect_length(1/|o| run of seed s, epoch e) - incorrect_length(C run of seed s, epoch e)
    statistic  = per seed, mean over the epochs of 1/|o|'s incorrect length minus the same of C's (epochs without
                 wrong samples skipped); two-sided paired t over seeds (scipy.stats.ttest_rel), 95%
    predicted  = the sign of slope(1/|o|) - slope(C) at initialisation (lab.experiments.length_oracle: the change
                 of the exact E[|o| | wrong] per unit of expected reward along each exact expected update), when
                 at least PREDICTION_AGREEMENT of the seeds share it; else no prediction
    verdict    = the paired interval above 0: "lengthens"; below 0: "shortens"; else "no difference seen", and
                 "underpowered" beside it when the design's detectable shift at 80% power
                 (lab.experiments.verdicts.detectable_shift) exceeds LENGTH_EFFECT; then "as predicted" or
                 "against the prediction" when there is one

A run-mean over all epochs keeps an early effect that later vanishes (lengths that converge under both
divisors add exact zeros, which leave the paired t statistic unchanged). The early (epochs 1..EARLY_EPOCHS)
and late (last LATE_EPOCHS) windows are reported beside it. Pure: the runs come from
`lab.experiments.sweep.run_sweep`, the exact numbers from `lab.experiments.length_oracle`; the figure is
`lab.experiments.length_figures.plot_length_bias`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from lab.experiments.intervals import paired_interval, paired_p_value
from lab.experiments.verdicts import detectable_shift, differences
from lab.experiments.work import Stages
from lab.training.config import TrainConfig
from lab.training.records import Records

BIASED, UNBIASED = "seq-mean-token-mean", "seq-mean-token-sum-norm"
DELTAS = ("raw", "centered", "normalized")
INIT_SCALES = (1.0, 0.1)
LECTURE, DR_GRPO = "lecture", "dr-grpo"
DR_GRPO_TASK = {"prompts": [[0], [1]], "vocab_size": 2}
"""Dr. GRPO's setting: a task the autoregressive policy can solve, with a 0/1 reward."""
DR_GRPO_OVERRIDES = {"reward": "exact-match", "max_length": 6, "init_scale": 0.1, "delta": "centered"}
EARLY_EPOCHS, LATE_EPOCHS = 10, 10
"""The windows reported beside the run mean: epochs 1..EARLY_EPOCHS, and the last LATE_EPOCHS."""
PREDICTION_AGREEMENT = 0.9
"""The share of seeds whose exact slope difference must share a sign for it to count as the prediction."""
ORACLE_SEEDS = 2
"""Seeds (0..ORACLE_SEEDS-1) whose exact expected-gradient flow is run per lecture setting (all seeds for DR_GRPO)."""


@dataclass(frozen=True)
class OracleCost:
    """Seconds of `exact_numbers`, in `lab.experiments.work`'s units (measured on the 2-core VM, one thread,
    scaled by that moment's training time against the work model): the flow's cost per run and epoch on each
    task, the slopes' per run. They weigh this stage in the reproduction's progress; nothing else reads them."""
    lecture_flow_s: float = 0.027
    dr_grpo_flow_s: float = 0.0028
    slope_s: float = 0.014


ORACLE_COST = OracleCost()


def oracle_runs(name: str, runs: list[TrainConfig], seeds: int) -> list[int]:
    """The runs whose exact flow `exact_numbers` computes: every Dr. GRPO run, the lecture task's first seeds."""
    return [i for i, c in enumerate(runs) if name == DR_GRPO or c.seed < min(ORACLE_SEEDS, seeds)]


def task_exact_work(name: str, runs: list[TrainConfig], seeds: int, cost: OracleCost = ORACLE_COST) -> float:
    """The estimated time of one task's slopes and flow in `exact_numbers`."""
    flow_s = cost.dr_grpo_flow_s if name == DR_GRPO else cost.lecture_flow_s
    return len(runs) * cost.slope_s + sum(runs[i].epochs + 1 for i in oracle_runs(name, runs, seeds)) * flow_s


def exact_work(configs: dict[str, list[TrainConfig]], seeds: int) -> float:
    """The estimated time of `exact_numbers(tasks, configs, seeds)`, for the reproduction's progress."""
    return sum(task_exact_work(name, runs, seeds) for name, runs in configs.items())


@dataclass(frozen=True)
class Setting:
    """One comparison: `overrides` of the base config on task `task`, run under both divisors."""

    label: str
    task: str
    overrides: dict = field(default_factory=dict)


SETTINGS = tuple(Setting(f"{delta}, init {scale:g}", LECTURE, {"delta": delta, "init_scale": scale})
                 for delta in DELTAS for scale in INIT_SCALES) + (
    Setting("0/1 reward (Dr. GRPO's setting), centered, init 0.1", DR_GRPO, DR_GRPO_OVERRIDES),)
NAMES = ("loss_agg", "delta", "init_scale")


def length_configs(seeds: int, base: TrainConfig) -> tuple[dict[str, list[TrainConfig]], list[tuple[list, list]]]:
    """Every run per task and, per setting, its (1/|o| runs, C runs) indices into that task's runs, seed order."""
    configs: dict[str, list[TrainConfig]] = {LECTURE: [], DR_GRPO: []}
    pairs = []
    for setting in SETTINGS:
        runs = configs[setting.task]
        sides = []
        for agg in (BIASED, UNBIASED):
            sides.append(list(range(len(runs), len(runs) + seeds)))
            runs += [base.replace(policy="autoregressive", loss_agg=agg, **setting.overrides, seed=s)
                     for s in range(seeds)]
        pairs.append(tuple(sides))
    return configs, pairs


def window(records: Records, metric: str, epochs: slice) -> np.ndarray:
    """float[run]: the metric's mean over `epochs`, NaN where every one is empty."""
    with warnings.catch_warnings():  # an all-NaN run is reported as missing, not warned about
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(records.epoch_metrics[metric][:, epochs], axis=1)


def late(records: Records, metric: str) -> np.ndarray:
    return window(records, metric, slice(-LATE_EPOCHS, None))


def predicted_sign(slope_difference: np.ndarray) -> int:
    """+1 / -1 when at least PREDICTION_AGREEMENT of the seeds' exact slope differences share that sign, else 0."""
    for sign in (1, -1):
        if (np.sign(slope_difference) == sign).mean() >= PREDICTION_AGREEMENT:
            return sign
    return 0


LENGTH_EFFECT = 0.25
"""The effect of interest on the run-mean wrong length, 1/|o| minus C: a quarter of a token."""


def verdict(low: float, high: float, predicted: int, detectable: float = 0.0) -> str:
    seen = 1 if low > 0 else -1 if high < 0 else 0
    words = {1: "lengthens", -1: "shortens", 0: "no difference seen"}[seen]
    if not seen and detectable > LENGTH_EFFECT:
        words += ", underpowered"
    if seen and predicted:
        words += ", as predicted" if seen == predicted else ", against the prediction"
    return words


def length_bias_markdown(records: dict[str, Records], pairs, slopes: dict[str, np.ndarray],
                         flows: dict[str, np.ndarray]) -> list[str]:
    """RESULTS.md's length-bias section. slopes[task]: float[run] exact slopes at init of that task's runs;
    flows[task]: float[run epoch+1] exact E[|o| | wrong] (NaN rows for runs without a flow)."""
    lines = ["| setting | exact at init: slope(1/\\|o\\|) - slope(C), median; seeds > 0 | predicted | "
             "run-mean incorrect length, 1/\\|o\\| - C [95% paired t] | p (two-sided) | seeds longer under 1/\\|o\\| | "
             f"epochs 1-{EARLY_EPOCHS} | last {LATE_EPOCHS} epochs | detectable at 80% power / needed | verdict |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for setting, (biased, unbiased) in zip(SETTINGS, pairs):
        run = records[setting.task]
        slope = slopes[setting.task][biased] - slopes[setting.task][unbiased]
        sign = predicted_sign(slope)
        whole = window(run, "incorrect_length", slice(None))
        early = window(run, "incorrect_length", slice(1, EARLY_EPOCHS + 1))
        final = late(run, "incorrect_length")
        diff = paired_interval(whole[biased], whole[unbiased])
        reach = detectable_shift(differences(whole[biased], whole[unbiased]))
        longer = int(np.nansum(whole[biased] > whole[unbiased]))
        cells = [f"{i.text(2)} (n={i.n})" for i in (paired_interval(w[biased], w[unbiased]) for w in (early, final))]
        lines.append(
            f"| {setting.label} | {np.median(slope):+.3f}; {int((slope > 0).sum())} of {len(slope)} | "
            f"{ {1: 'longer', -1: 'shorter', 0: 'none'}[sign] } | {diff.text(3)} (n={diff.n}) | "
            f"{paired_p_value(whole[biased], whole[unbiased]):.2g} | {longer} of {diff.n} | {cells[0]} | {cells[1]} | "
            f"{reach:.3g} / {LENGTH_EFFECT} | **{verdict(diff.low, diff.high, sign, reach)}** |")
    lines += ["", "The exact expected-gradient flow (`lab.experiments.length_oracle`: each epoch the exact expected "
              "naive surrogate of the epoch's policy, the runs' Adam steps), E[\\|o\\| \\| wrong] at epochs 0, "
              f"{EARLY_EPOCHS} and the end, mean over the seeds it ran for:", "",
              "| setting | seeds | 1/\\|o\\| | C | 1/\\|o\\| - C at the end |", "| --- | --- | --- | --- | --- |"]
    for setting, (biased, unbiased) in zip(SETTINGS, pairs):
        flow = flows[setting.task]
        a, b = flow[biased], flow[unbiased]
        keep = ~np.isnan(a[:, 0])
        if not keep.any():
            continue
        a, b = a[keep].mean(0), b[keep].mean(0)
        text = lambda f: ", ".join(f"{f[e]:.2f}" for e in (0, min(EARLY_EPOCHS, len(f) - 1), -1))  # noqa: E731
        lines.append(f"| {setting.label} | {int(keep.sum())} | {text(a)} | {text(b)} | {a[-1] - b[-1]:+.2f} |")
    return lines


def exact_numbers(tasks: dict, configs: dict[str, list[TrainConfig]], seeds: int,
                  progress=None) -> tuple[dict, dict]:
    """(slopes, flows) of `length_bias_markdown`: slopes at init for every run; the flow for the runs of seeds
    below ORACLE_SEEDS on the lecture task and for every run of DR_GRPO (NaN rows elsewhere). `progress(done,
    total)` over the tasks, each weighed by `task_exact_work`."""
    from lab.experiments.length_oracle import Oracle

    slopes, flows = {}, {}
    stages = Stages(progress, [task_exact_work(name, runs, seeds) for name, runs in configs.items()])
    for k, (name, runs) in enumerate(configs.items()):
        slopes[name] = Oracle(tasks[name], runs).slopes()
        chosen = oracle_runs(name, runs, seeds)
        flow = np.full((len(runs), runs[0].epochs + 1), np.nan)
        flow[chosen] = Oracle(tasks[name], [runs[i] for i in chosen]).flow(progress=stages(k))
        flows[name] = flow
    return slopes, flows


def pull_to_length(records: Records, length: float, cap: int) -> str:
    """One sentence: how many (run, epoch) of the last LATE_EPOCHS have every wrong sample of `length` tokens."""
    recent = records.epoch_metrics["incorrect_length"][:, -LATE_EPOCHS:]
    present = ~np.isnan(recent)
    exact = int((np.abs(recent[present] - length) < 1e-6).sum())
    return (f"In the last {LATE_EPOCHS} epochs {exact} of {int(present.sum())} (run, epoch) pairs with wrong samples "
            f"have a mean wrong length of exactly {length:g} tokens (lengths range 1 to {cap}).")
