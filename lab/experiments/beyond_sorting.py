"""The lecture's conclusions beyond sorting: its main verdicts re-decided on every task, each with paired runs.

    d_i = metric(a, seed i) - metric(b, seed i)                     the two settings share seed i (and its prompts)
    interval = mean(d) +- t_{0.975, n-1} s_d / sqrt(n)              paired t (lab.experiments.intervals)
    detectable = (t_{0.975, n-1} + t_{0.80, n-1}) s_d / sqrt(n)     the smallest true difference these seeds find
                                                                    with 80% power (a narrower effect can hide)

Each task trains on its own prompts under its default reward, with the lecture's settings otherwise (100 epochs x 10
steps, G = 10, Adam 1e-3), seeds 0..N-1; a task's runs are one batch. The comparisons (`COMPARISONS`):

    centered beats raw                  final reward fraction, centered - raw (naive loss)           above 0
    a smaller initialisation explores   final greedy accuracy, init 0.1 - init 1 (centered, clipped) above 0
    clipping makes little difference    final reward fraction, clipped - unclipped (centered)        within +-MARGIN

`verdict` turns an interval into `holds`, `reversed` (the other way, with 95% confidence), `no difference` (within
+-MARGIN of 0: the rule `above 0` cannot be met by these seeds), `does not hold` (an equivalence rule whose interval
leaves the margin) or `inconclusive`; tests/experiments/test_beyond_sorting.py shows each answer given. A verdict that
holds on sorting and on no other task is marked as sorting's alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lab.experiments.intervals import Interval, paired_interval, t_quantile
from lab.experiments.sweep import run_sweep, sweep_work
from lab.experiments.work import Stages
from lab.training.config import TrainConfig
from lab.training.records import Records
from tasks.catalog import DEFAULT_TASK, make_named_task, task_names

SETTINGS = {
    "raw": {"delta": "raw"},
    "centered": {"delta": "centered"},
    "unclipped": {"delta": "centered", "loss": "unclipped"},
    "clipped": {"delta": "centered", "loss": "clipped"},
    "small init": {"delta": "centered", "loss": "clipped", "init_scale": 0.1},
}
"""Overrides of the lecture's config, by the name the comparisons use."""

MARGIN = 0.05
"""Little difference: within +-5% of the optimum (a reward fraction of 0.05; the lecture's section uses the same)."""
POWER = 0.80


@dataclass(frozen=True)
class Comparison:
    """One of the lecture's verdicts: setting `a` against setting `b`, paired by seed, on `metric` at the end."""

    claim: str
    a: str
    b: str
    metric: str
    rule: str
    """`above` (a - b above 0) or `equivalent` (a - b within +-MARGIN)"""


COMPARISONS = (
    Comparison("Centered deltas beat raw ones (naive loss).", "centered", "raw", "reward_fraction", "above"),
    Comparison("The lecture's initialisation gets stuck; a smaller one (init scale 0.1) explores and solves more "
               "prompts (centered, clipped).", "small init", "clipped", "greedy_accuracy", "above"),
    Comparison("Clipping makes little difference (clipped against unclipped, centered).", "clipped", "unclipped",
               "reward_fraction", "equivalent"),
)


def beyond_configs(seeds: int, base: TrainConfig, reward: str) -> list[TrainConfig]:
    """Every setting x seeds 0..seeds-1, setting-major, under `reward`."""
    return [base.replace(**overrides, reward=reward, seed=seed) for overrides in SETTINGS.values()
            for seed in range(seeds)]


def ordered_tasks() -> tuple[str, ...]:
    """Every task file, the lecture's first (the verdicts' reference)."""
    return (DEFAULT_TASK, *(name for name in task_names() if name != DEFAULT_TASK))


def beyond_work(seeds: int, base: TrainConfig, tasks: tuple[str, ...]) -> float:
    """The section's estimated seconds (`lab.experiments.work`), for the reproduction's progress."""
    return len(tasks) * sweep_work(beyond_configs(seeds, base, base.reward))


def run_beyond_sorting(seeds: int, base: TrainConfig, device, progress: Callable | None = None,
                       tasks: tuple[str, ...] | None = None) -> dict[str, Records]:
    """Each task's runs (its own prompts and default reward), one `run_sweep` per task; the lecture's task first."""
    tasks = tasks or ordered_tasks()
    stages = Stages(progress, [sweep_work(beyond_configs(seeds, base, base.reward))] * len(tasks))
    results = {}
    for i, name in enumerate(tasks):
        task = make_named_task(name)
        results[name] = run_sweep(task, beyond_configs(seeds, base, task.default_reward), device=device,
                                  progress=stages(i))
    return results


def detectable(diff: np.ndarray, power: float = POWER) -> float:
    """The smallest true mean difference a paired t-test at 5% finds with probability `power` over these seeds."""
    diff = diff[~np.isnan(diff)]
    if len(diff) < 2:
        return math.nan
    n = len(diff)
    return (t_quantile(0.975, n - 1) + t_quantile(power, n - 1)) * float(diff.std(ddof=1)) / math.sqrt(n)


def verdict(diff: Interval, rule: str, margin: float = MARGIN) -> str:
    """The verdict of a paired interval of a - b under `rule` (module docstring)."""
    if rule == "above":
        if diff.low > 0:
            return "holds"
        if diff.high < 0:
            return "reversed"
        return "no difference" if -margin < diff.low and diff.high < margin else "inconclusive"
    if rule == "equivalent":
        if -margin < diff.low and diff.high < margin:
            return "holds"
        return "does not hold" if diff.low > margin or diff.high < -margin else "inconclusive"
    raise ValueError(f"unknown rule {rule!r}; choose one of: above, equivalent")


def paired(records: Records, comparison: Comparison, seeds: int) -> tuple[Interval, float]:
    """The paired interval of a - b over seeds and the smallest detectable effect, from a task's records."""
    final = records.final(comparison.metric)
    names = list(SETTINGS)
    a = final[names.index(comparison.a) * seeds:(names.index(comparison.a) + 1) * seeds]
    b = final[names.index(comparison.b) * seeds:(names.index(comparison.b) + 1) * seeds]
    return paired_interval(a, b), detectable(np.asarray(a, float) - np.asarray(b, float))


def section_lines(results: dict[str, Records], seeds: int) -> list[str]:
    """RESULTS.md's section: one row per (claim, task), then which verdicts are sorting's alone."""
    lines = ["## The lecture's conclusions beyond sorting", "",
             "The lecture's main verdicts re-decided on every task in `tasks/` (docs/tasks.md), each on its "
             f"own prompts under its default reward, the lecture's settings otherwise; {seeds} seeds, the two "
             "settings of a row paired by seed. Rules: the docstring of `lab/experiments/beyond_sorting.py` "
             f"(little difference = within +-{MARGIN:g} of the optimum's reward fraction); detectable = the "
             f"smallest true difference these seeds find with {POWER:.0%} power. Every other section of this page "
             "is the lecture's task's (sorting).", "",
             "| the lecture says | task (reward) | decided by | a - b [95% paired t] | detectable | verdict |",
             "| --- | --- | --- | --- | --- | --- |"]
    verdicts: dict[str, dict[str, str]] = {}
    for comparison in COMPARISONS:
        rule = "above 0" if comparison.rule == "above" else f"within +-{MARGIN:g}"
        for name, records in results.items():
            diff, effect = paired(records, comparison, seeds)
            answer = verdict(diff, comparison.rule)
            verdicts.setdefault(comparison.claim, {})[name] = answer
            lines.append(f"| {comparison.claim} | {name} ({records.configs[0].reward}) | final "
                         f"{comparison.metric.replace('_', ' ')}, {comparison.a} - {comparison.b}, {rule} | "
                         f"{diff.text(3)} | {effect:.3f} | **{answer}** |")
    lines += ["", *_agreement(verdicts)]
    return lines


def _agreement(verdicts: dict[str, dict[str, str]]) -> list[str]:
    """A sentence per claim: on which tasks it holds, and whether that is sorting's alone."""
    out = []
    for claim, by_task in verdicts.items():
        holds = [name for name, answer in by_task.items() if answer == "holds"]
        others = ", ".join(f"{name}: {answer}" for name, answer in by_task.items() if name != DEFAULT_TASK)
        if holds == [DEFAULT_TASK]:
            reading = "sorting's alone"
        elif holds and len(holds) == len(by_task):
            reading = "holds on every task"
        elif holds:
            reading = "holds on " + ", ".join(holds)
        else:
            reading = "holds on no task"
        out.append(f"- {claim} {reading[0].upper() + reading[1:]} ({others or 'no other task'}).")
    return out
