"""Sweeps: a grid of settings x seeds 0..N-1, trained as few batched computations as shapes allow.

    configs = [base.replace(**point, seed=s) for point in product(grid) for s in range(N)]

Runs that share every `SHARED_FIELDS` value (group size, epochs, ...) train
together in one call of `lab.training.train.train`; a seed's run is the same alone or
inside a sweep (in float64 to about 1e-13; in float32 to its rounding, which a near-tie can grow:
docs/reproducibility.md), so batching changes speed, not results. The summary gives,
per grid point, the final mean reward with a Student-t 95% interval over seeds
and the fraction of runs whose greedy response is optimal on every training
prompt with a Wilson 95% interval (`lab.experiments.intervals`), both over the runs that did not diverge;
the diverged runs are counted per grid point (`lab.training.divergence`). Pure: nothing prints.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
import torch

from lab.exact.stuck import Endings, judge_endings
from lab.core.modes import NEEDS_CRITIC
from lab.core.modes import TrainingLoss
from lab.training.config import SHARED_FIELDS, SWEPT_FIELDS, ConfigError, TrainConfig
from lab.training.config_checks import DPO_DEFAULTS, KL_DEFAULTS, default_estimator
from lab.experiments.loss_grid import check_loss_fields, drop_unread
from lab.experiments.intervals import Interval, mean_interval, wilson_interval
from lab.experiments.work import Stages, batch_work
from lab.experiments.merged_records import merge_records
from lab.training.records import Records
from lab.files.run_text import format_value
from lab.training.train import train
from tasks import Task
from tasks import OPTIMAL_TOLERANCE

DPO_GRID_FIELDS = tuple(name for name in SWEPT_FIELDS if name in DPO_DEFAULTS)
"""The grid fields of --loss dpo (`ipo_logps`: of its --dpo-loss ipo points only). The grid's axes are the fields
`SWEPT_FIELDS` marks (each a repeatable `lab sweep` option); the tables' columns are read off the runs' configs
(`lab.training.settings.table_fields`). A DPO point keeps the KL options' defaults (its beta is no penalty), and is
kept once."""


def check_seeds(seeds: int) -> None:
    if seeds <= 0:
        raise ConfigError(f"--seeds must be a positive integer, got {seeds}")


def build_grid(base: TrainConfig, grid: dict[str, Sequence], seeds: int,
               critic: dict | None = None) -> list[TrainConfig]:
    """Every combination of the grid's values (in the order given), each with seeds 0..seeds-1.

    The critic's settings (`gae_lambda` in the grid, the fields of `critic` for every point) apply to
    the `--delta gae` points only, DPO's (`pairs`, `preference`, `dpo_loss`) to the `--loss dpo` points only,
    `ipo_logps` to their `--dpo-loss ipo` points only; a point of another delta or loss keeps their defaults, and is
    kept once.
    """
    check_seeds(seeds)
    unknown = set(grid) - set(SWEPT_FIELDS)
    if unknown:
        raise ConfigError(f"cannot sweep over {', '.join(sorted(unknown))}; choose from: {', '.join(SWEPT_FIELDS)}")
    names = list(grid)
    for name in names:
        values = list(grid[name])
        if not values:
            raise ConfigError(f"the grid gives no value for {name}")
        if len(set(values)) < len(values):
            shown = ", ".join(str(v.value if isinstance(v, Enum) else v) for v in values)
            raise ConfigError(f"{name} is given the same value twice: {shown}")
    dpo_given = [n for n in DPO_GRID_FIELDS if any(v is not None for v in grid.get(n, []))]
    losses = [getattr(v, "value", v) for v in grid.get("loss", [base.loss])]
    if dpo_given and "dpo" not in losses:
        raise ConfigError(f"--{dpo_given[0].replace('_', '-')} applies to --loss dpo only; drop it or add --loss dpo")
    if "ipo_logps" in dpo_given and "ipo" not in [getattr(v, "value", v) for v in grid.get("dpo_loss", [])]:
        raise ConfigError("--ipo-logps applies to --dpo-loss ipo only; drop it or add --dpo-loss ipo")
    check_loss_fields(base, grid)
    points, seen = [], set()
    for point in itertools.product(*(list(grid[n]) for n in names)):
        settings = dict(zip(names, point))
        drop_unread(settings, base)  # a loss's own settings on its points only
        delta = settings.get("delta", base.delta)  # a wrong name is the config's error to report
        if getattr(delta, "value", delta) in {m.value for m in NEEDS_CRITIC}:
            settings.update(critic or {})
        else:
            settings.pop("gae_lambda", None)
        if "kl_estimator" in settings and settings["kl_estimator"] is None:  # not named: the placement's own
            settings["kl_estimator"] = default_estimator(settings.get("kl_in", base.kl_in), settings.get("loss", base.loss))
        loss = settings.get("loss", base.loss)
        if getattr(loss, "value", loss) == TrainingLoss.dpo.value:
            for name in KL_DEFAULTS:
                settings.pop(name, None)
            dpo_loss = settings.get("dpo_loss", base.dpo_loss)
            if getattr(dpo_loss, "value", dpo_loss) != "ipo":
                settings.pop("ipo_logps", None)  # IPO's log-probs: the --dpo-loss ipo points only
        else:
            for name in DPO_GRID_FIELDS:  # DPO's settings apply to the --loss dpo points only
                settings.pop(name, None)
        key = tuple((n, settings[n]) for n in names if n in settings)
        if key not in seen:
            seen.add(key)
            points.append(settings)
    return [base.replace(**settings, seed=seed) for settings in points for seed in range(seeds)]


METHOD_FIELDS = {"pairs_per_prompt": "offline pairs", "pairs_from": "offline pairs", "demos": TrainingLoss.sft, "demo_noise": TrainingLoss.sft,
                 "demos_from": TrainingLoss.sft, "ei_filter": TrainingLoss.expert_iteration,
                 "reward_threshold": TrainingLoss.expert_iteration,
                 "sapo_temperature_pos": TrainingLoss.sapo, "sapo_temperature_neg": TrainingLoss.sapo,
                 "vespo_k_pos": TrainingLoss.vespo, "vespo_lambda_pos": TrainingLoss.vespo,
                 "vespo_k_neg": TrainingLoss.vespo, "vespo_lambda_neg": TrainingLoss.vespo}
"""A sweep's single-valued settings that belong to one method's or loss's points: offline DPO's, SFT's, expert
iteration's, SAPO's and VESPO's."""



def method_settings(configs: list[TrainConfig], **given) -> list[TrainConfig]:
    """The configs with each given method setting (None: not given) on the points of its method only, so a sweep
    can compare methods; a setting whose method no point has is an error (one line)."""
    given = {name: value for name, value in given.items() if value is not None}
    for name in given:
        owner = METHOD_FIELDS[name]
        if not any(_belongs(c, owner) for c in configs):
            wanted = "--pairs offline" if owner == "offline pairs" else f"--loss {owner.value}"
            raise ConfigError(f"--{name.replace('_', '-')} applies to {wanted} only, which no point of the sweep has")

    def specialise(config: TrainConfig) -> TrainConfig:
        mine = {name: value for name, value in given.items() if _belongs(config, METHOD_FIELDS[name])}
        return config.replace(**mine) if mine else config

    return [specialise(c) for c in configs]


def _belongs(config: TrainConfig, owner) -> bool:
    return config.pairs == "offline" if owner == "offline pairs" else config.loss is owner


def setting(config: TrainConfig, names: Sequence[str]) -> tuple:
    """The grid point of a config: its values of `names`, as plain values (enums as their names)."""
    data = config.plain()
    return tuple(data[name] for name in names)


def setting_label(names: Sequence[str], point: tuple) -> str:
    """`name=value, ...` of a grid point; a setting that does not apply to the point (None, as --epsilon-high on a
    naive-loss point of a sweep over --loss) is left out."""
    return ", ".join(f"{n}={format_value(v) if not isinstance(v, str) else v}" for n, v in zip(names, point)
                     if v is not None) or "all runs"


def batches(configs: Sequence[TrainConfig]) -> list[list[int]]:
    """Indices of configs that can train together (equal `SHARED_FIELDS` and method), in first-seen order."""
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault((c.method, *(getattr(c, f) for f in SHARED_FIELDS)), []).append(i)
    return list(groups.values())


def sweep_work(configs: Sequence[TrainConfig]) -> float:
    """Estimated seconds of `run_sweep(configs)`: its batches one after another."""
    return sum(batch_work([configs[i] for i in group]) for group in batches(configs))


def run_sweep(
    task: Task,
    configs: Sequence[TrainConfig],
    device: torch.device | str = "cpu",
    progress: Callable[[int, int], None] | None = None,
) -> Records:
    """Train every config, batching those that can share a computation; one `Records`, configs' order.

    `progress(done, total)` counts work over all batches (`lab.experiments.work`: each batch weighs the
    time it takes, so the time left holds still from a batch of a few runs to one of many).
    """
    groups = batches(configs)
    stages = Stages(progress, [batch_work([configs[i] for i in group]) for group in groups])
    parts = [(group, train(task, [configs[i] for i in group], device=device, progress=stages(k)))
             for k, group in enumerate(groups)]
    return merge_records(parts, len(configs))


def optimal_everywhere(records: Records) -> np.ndarray:
    """bool[run]: the final greedy response is optimal on every training prompt."""
    return records.final("greedy_fraction") >= 1 - OPTIMAL_TOLERANCE


@dataclass(frozen=True)
class SettingSummary:
    """One grid point over its seeds."""

    point: tuple
    seeds: int
    final_mean_reward: Interval
    """t-interval over the seeds that did not diverge of the last epoch's mean sample reward"""
    optimal_fraction: Interval
    """Wilson interval of the fraction of those runs whose greedy response is optimal on every prompt"""
    optimum: float
    diverged: int = 0
    """runs of this point that diverged: left out of both intervals"""
    final_gold_reward: Interval | None = None
    """a sweep with a learned reward (`--reward learned:PATH`): t-interval of the last epoch's exact gold reward"""


def summarise(records: Records, names: Sequence[str]) -> list[SettingSummary]:
    """Per grid point (values of `names`), in first-seen order."""
    points: dict[tuple, list[int]] = {}
    for run, config in enumerate(records.configs):
        points.setdefault(setting(config, names), []).append(run)
    final, optimal, diverged = records.final("mean_reward"), optimal_everywhere(records), records.diverged()
    gold = records.final("gold_reward_exact") if "gold_reward_exact" in records.epoch_metrics else None
    nothing = Interval(math.nan, math.nan, math.nan, 0)  # every seed diverged: no estimate
    summaries = []
    for point, runs in points.items():
        kept = [r for r in runs if not diverged[r]]
        summaries.append(SettingSummary(
            point, len(runs), mean_interval(final[kept]) if kept else nothing,
            wilson_interval(int(optimal[kept].sum()), len(kept)) if kept else nothing,
            float(records.optimum[runs].mean()), len(runs) - len(kept),
            None if gold is None else mean_interval(gold[kept]) if kept else nothing))
    return summaries


SUMMARY_COLUMNS = ("seeds", "diverged", "final_mean_reward", "final_mean_reward_low", "final_mean_reward_high",
                   "optimal_fraction", "optimal_fraction_low", "optimal_fraction_high", "optimum")


GOLD_COLUMNS = ("final_gold_reward_exact", "final_gold_reward_exact_low", "final_gold_reward_exact_high")
"""summary.csv's last columns where the sweep trained against a learned reward (the true reward, exactly)."""


def summary_csv(summaries: Sequence[SettingSummary], names: Sequence[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    gold = any(s.final_gold_reward is not None for s in summaries)
    # settings by their plain names: no outcome column shares one (the metric tables prefix them: lab.files.tables)
    writer.writerow([*names, *SUMMARY_COLUMNS, *(GOLD_COLUMNS if gold else ())])
    for s in summaries:
        r, f, g = s.final_mean_reward, s.optimal_fraction, s.final_gold_reward
        values = (r.estimate, r.low, r.high, f.estimate, f.low, f.high, s.optimum,
                  *((g.estimate, g.low, g.high) if gold else ()))
        writer.writerow([*s.point, s.seeds, s.diverged, *(f"{v:.6g}" if math.isfinite(v) else "" for v in values)])
    return out.getvalue()


def summary_table(summaries: Sequence[SettingSummary], names: Sequence[str]) -> str:
    """A plain-text table for the terminal (the caller prints it); a `diverged` column and a note
    appear when some run diverged."""
    any_diverged = any(s.diverged for s in summaries)
    gold = any(s.final_gold_reward is not None for s in summaries)
    header = ["setting", "seeds", *(["diverged"] * any_diverged), "final mean reward [95% t]",
              "optimal on every prompt [95% Wilson]", *(["final exact gold reward [95% t]"] * gold)]

    def fraction(f: Interval) -> str:
        return "-" if f.n == 0 else f"{f.estimate:.0%} [{f.low:.0%}, {f.high:.0%}]"

    rows = [[setting_label(names, s.point), str(s.seeds), *([str(s.diverged)] * any_diverged),
             ("-" if s.final_mean_reward.n == 0 else s.final_mean_reward.text(2)) + f" / {s.optimum:g}",
             fraction(s.optimal_fraction),
             *((["-" if s.final_gold_reward.n == 0 else s.final_gold_reward.text(2)]) if gold else [])]
            for s in summaries]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    note = (["diverged runs are left out of the reward and the fraction (- : every seed diverged)"]
            if any_diverged else [])
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:], *note])


def final_endings(records: Records, runs: list[int], task: Task | None = None) -> Endings:
    """Judge the final greedy response of each run in `runs` on each training prompt (`lab.exact.stuck`).

    The runs must share one reward (a name `task` registers; None: the lecture's task); the vocabulary is the
    policy's own (its embedding's rows)."""
    names = {records.configs[r].reward for r in runs}
    if len(names) != 1:
        raise ValueError(f"runs with different rewards cannot be judged together: {sorted(names)}")
    from tasks.catalog import default_task

    task = default_task() if task is None else task
    return judge_endings(task.reward_fn(names.pop()), torch.as_tensor(records.prompts), torch.as_tensor(records.greedy_responses[runs]),
                         torch.as_tensor(records.optimum[runs]), records.state["embedding"].shape[-2])
