"""The critic experiment's figure (`figures/critic.png`): reward and exact critic error against the step,
for both policies, each curve the mean over seeds with its 95% t-band (`lab.experiments.figures.mean_band`)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from lab.experiments.critic_results import SETTINGS, CriticRuns, label, late
from lab.experiments.figures import fit_title, mean_band


def _band(ax, records, metric: str, name: str, color) -> None:
    curves = records.epoch_metrics[metric].astype(float)
    steps = np.arange(curves.shape[1]) * records.configs[0].steps
    mean, low, high = mean_band(curves)
    ax.plot(steps, mean, color=color, lw=1.2, label=name)
    ax.fill_between(steps, low, high, color=color, alpha=0.2, lw=0)


def plot_critic(runs: CriticRuns, path: Path, title: str) -> Path:
    matplotlib.use("Agg")
    fig = Figure(figsize=(11, 7.5))
    axes = fig.subplots(2, 2)
    colors = matplotlib.colormaps["tab10"].colors
    for row, policy in enumerate(("factorised", "autoregressive")):
        chosen = [(i, o, r) for i, (o, r) in enumerate(zip(SETTINGS, runs.records)) if label(o).startswith(policy)]
        for i, overrides, records in chosen:
            _band(axes[row, 0], records, "mean_reward", label(overrides).split(": ")[1], colors[i % 10])
            if overrides["delta"] == "gae":
                _band(axes[row, 1], records, "value_error_exact", label(overrides).split(": ")[1], colors[i % 10])
        axes[row, 0].set_title(f"{policy} policy: mean sample reward", fontsize=9)
        axes[row, 1].set_title(f"{policy} policy: exact critic error E[(V_psi - V^pi)^2]", fontsize=9)
        axes[row, 1].set_yscale("log")
        for ax in axes[row]:
            ax.set_xlabel("optimizer step", fontsize=8)
            ax.legend(fontsize=7, loc="lower left" if ax is axes[1, 1] else "best")
    inset = axes[1, 1].inset_axes([0.55, 0.55, 0.42, 0.4])
    for i, overrides, records in [(i, o, r) for i, (o, r) in enumerate(zip(SETTINGS, runs.records))
                                  if o.get("policy") == "autoregressive" and o["delta"] == "gae"]:
        positions = sorted(k for k in records.epoch_metrics if k.startswith("value_error_exact_"))
        inset.plot(range(len(positions)), [np.nanmean(late(records, k)) for k in positions], marker="o",
                   color=colors[i % 10], lw=1)
    inset.set_title("late error by position t", fontsize=7)
    inset.tick_params(labelsize=6)
    fig.suptitle(fit_title(title, 11), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path
