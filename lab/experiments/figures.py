"""Multi-seed figures: mean curves with 95% bands, and the KL trade-off. Imports matplotlib.

    band(epoch) = mean over seeds +- t_{0.975, n-1} * std over seeds / sqrt(n)     (lab.experiments.intervals)

Every curve is the epoch's mean sample reward against the optimizer step at
which that epoch's samples were drawn (the lecture's x axis); one thin line may
mark a single seed, or a run kept out of the mean (the lecture's own seed-5 run).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from lab.experiments.intervals import LEVEL, t_quantile
from lab.training.records import Records
from lab.experiments.sweep import setting, setting_label


def mean_band(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """curves float[seed epoch] -> mean, low, high float[epoch] (pointwise t-interval)."""
    mean = curves.mean(axis=0)
    n = curves.shape[0]
    if n < 2:
        return mean, mean, mean
    half = t_quantile(1 - (1 - LEVEL) / 2, n - 1) * curves.std(axis=0, ddof=1) / math.sqrt(n)
    return mean, mean - half, mean + half


TITLE_FONTSIZE = 10
"""points; with CHAR_WIDTH the basis of how many characters a title line may hold."""
CHAR_WIDTH = 0.55
"""average glyph width of the title font, as a fraction of its size (DejaVu Sans; generous)."""


def fit_title(text: str, width_in: float, fontsize: float = TITLE_FONTSIZE) -> str:
    """`text` wrapped into lines that fit a figure `width_in` inches wide: a centred title wider
    than its figure loses both ends, and no layout engine wraps it."""
    chars = max(20, int(width_in * 72 / (CHAR_WIDTH * fontsize)))
    return "\n".join(textwrap.wrap(text, chars))


def _runs_by_point(records: Records, names: Sequence[str]) -> dict[tuple, list[int]]:
    points: dict[tuple, list[int]] = {}
    for run, config in enumerate(records.configs):
        points.setdefault(setting(config, names), []).append(run)
    return points


def draw_curves(ax, records: Records, names: Sequence[str], metric: str = "mean_reward",
                highlight_seed: int | None = None, runs: Sequence[int] | None = None,
                legend_below: bool = False, highlight_runs: Sequence[int] | None = None) -> None:
    """One mean curve with its band per grid point of `names` (optionally only among `runs`).

    `legend_below` puts the legend under the axes, where it cannot cover a curve (the figure's
    layout engine must make room for it: `layout="constrained"`). Thin: the run with `highlight_seed`
    among a point's runs, or, given `highlight_runs`, the one of those runs at that point (it need not
    be among `runs`, so it can stay out of the mean)."""
    keep = set(range(records.num_runs) if runs is None else runs)
    points = {p: [r for r in rs if r in keep] for p, rs in _runs_by_point(records, names).items()}
    for color, (point, point_runs) in zip(matplotlib.rcParams["axes.prop_cycle"].by_key()["color"] * 4,
                                          ((p, r) for p, r in points.items() if r)):
        curves = records.epoch_metrics[metric][point_runs]
        steps = np.arange(curves.shape[1]) * records.configs[point_runs[0]].steps
        mean, low, high = mean_band(curves)
        ax.plot(steps, mean, color=color, lw=1.6, label=f"{setting_label(names, point)} (n={len(point_runs)})")
        ax.fill_between(steps, low, high, color=color, alpha=0.2, lw=0)
        seeded = ([r for r in highlight_runs if setting(records.configs[r], names) == point]
                  if highlight_runs is not None else
                  [r for r in point_runs if records.configs[r].seed == highlight_seed])
        if seeded:
            ax.plot(steps, records.epoch_metrics[metric][seeded[0]], color=color, lw=0.6, alpha=0.9, ls="-")
    optimum = records.optimum[sorted(keep)].mean()
    if metric == "mean_reward":
        ax.axhline(optimum, color="k", lw=0.8, ls=":", label=f"optimum ({optimum:g})")
    ax.set_xlabel("step")
    ax.set_ylabel(metric.replace("_", " "))
    ax.grid(alpha=0.3)
    if legend_below:
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    else:
        ax.legend(fontsize=7, loc="lower right")


def plot_sweep(records: Records, names: Sequence[str], path: Path, title: str | None = None,
               highlight_seed: int | None = None) -> Path:
    """curves.png of `lab sweep`: mean sample reward per grid point with its 95% band."""
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.subplots()
    draw_curves(ax, records, names, highlight_seed=highlight_seed)
    ax.set_title(title or f"mean reward, {LEVEL:.0%} t-band over seeds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return Path(path)


def plot_panels(records: Records, panels: Sequence[tuple[str, Sequence[str], Sequence[int]]], path: Path,
                suptitle: str, metric: str = "mean_reward", highlight_seed: int | None = None,
                highlight_runs: Sequence[int] | None = None) -> Path:
    """Several `draw_curves` panels side by side: (title, names, runs) each, sharing the y axis;
    every legend sits under its panel and the title is wrapped to the figure's width."""
    width = 4.6 * len(panels) if len(panels) > 1 else 6.0
    fig = Figure(figsize=(width, 4.8), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)
    for ax, (title, names, runs) in zip(axes[0], panels):
        draw_curves(ax, records, names, metric=metric, highlight_seed=highlight_seed, runs=runs,
                    legend_below=True, highlight_runs=highlight_runs)
        ax.set_title(title, fontsize=9)
    fig.suptitle(fit_title(suptitle, width), fontsize=TITLE_FONTSIZE)
    fig.savefig(path, dpi=100)
    return Path(path)


def plot_kl_tradeoff(records: Records, names: Sequence[str], runs: Sequence[int], betas: Sequence[float],
                     reward: Sequence, kl: Sequence, path: Path, title: str) -> Path:
    """Left: reward curves per beta. Right: final mean reward against final KL to the reference,
    one point per beta: vertically the reward's mean and 95% t-interval, horizontally the KL's
    median and quartiles over seeds (reward, kl: `lab.experiments.intervals.Interval` per beta); the
    panel's title and axis labels say which is which."""
    width = 10.4
    fig = Figure(figsize=(width, 4.9), layout="constrained")
    left, right = fig.subplots(1, 2)
    draw_curves(left, records, names, runs=runs, legend_below=True)
    for beta, r, k in zip(betas, reward, kl):
        right.errorbar(k.estimate, r.estimate, xerr=[[k.estimate - k.low], [k.high - k.estimate]],
                       yerr=[[r.estimate - r.low], [r.high - r.estimate]], fmt="o", capsize=3,
                       label=f"beta={beta:g}")
    right.set_xscale("symlog", linthresh=1e-4)  # runs whose groups stopped varying sit at exactly 0
    right.set_xlabel("exact KL to the reference per sequence, last reference period\n"
                     "(x: median and quartiles over seeds)")
    right.set_ylabel(f"final mean reward (y: mean, {LEVEL:.0%} t-interval)")
    right.set_title(fit_title(f"vertical bars: {LEVEL:.0%} t-interval of the mean final reward over seeds; "
                              "horizontal bars: quartiles (25% to 75%) of the KL over seeds, dot at the median",
                              width / 2, fontsize=8), fontsize=8)
    right.grid(alpha=0.3)
    right.legend(fontsize=7)
    fig.suptitle(fit_title(title, width), fontsize=TITLE_FONTSIZE)
    fig.savefig(path, dpi=100)
    return Path(path)
