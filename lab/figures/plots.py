"""Figures of single runs and of `lab diagnose` (matplotlib is imported here and in lab/experiments/figures.py only).

A run's figure follows the lecture's (train loss and mean reward against the
optimizer step), adds the greedy response's reward and marks the optimum; a KL
panel appears when a KL penalty is on and a clip panel when the loss clips.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from lab.figures.figure_files import figure_format, figure_metadata
from lab.files.temporaries import atomic_path
from lab.training.records import Records


def _epoch_steps(records: Records, run: int) -> np.ndarray:
    """The step at which each epoch's samples were drawn (its first step)."""
    epochs = records.epoch_metrics["mean_reward"].shape[1]
    return np.arange(epochs) * records.configs[run].steps


def plot_run(records: Records, path: Path, run: int = 0, title: str | None = None) -> Path:
    """Save run `run`'s curves to `path` (PNG) and return the path."""
    config = records.configs[run]
    panels = ["loss", "reward"]
    if config.kl > 0:
        panels.append("kl")
    if config.loss.entry.clips:  # the loss's own clip fraction: what it cut
        panels.append("clip")
    fig = Figure(figsize=(4.2 * len(panels), 3.4))
    axes = fig.subplots(1, len(panels), squeeze=False)
    steps = np.arange(records.step_metrics["loss"].shape[1])
    epoch_steps = _epoch_steps(records, run)
    optimum = records.optimum[run].mean()
    for ax, panel in zip(axes[0], panels):
        if panel == "loss":
            ax.plot(steps, records.step_metrics["loss"][run], lw=0.8)
            ax.set_ylabel("train loss")
        elif panel == "reward":
            ax.plot(epoch_steps, records.epoch_metrics["mean_reward"][run], label="mean reward of samples")
            ax.plot(epoch_steps + config.steps, records.epoch_metrics["greedy_reward"][run],
                    label="greedy response", lw=0.9, ls="--")
            ax.axhline(optimum, color="k", lw=0.8, ls=":", label=f"optimum ({optimum:g})")
            ax.set_ylabel("reward")
            ax.legend(fontsize=7, loc="lower right")
        elif panel == "kl":
            ax.plot(steps, records.step_metrics["kl"][run], lw=0.8)
            ax.set_ylabel("KL to reference (k3)")
        elif panel == "clip":
            ax.plot(steps, records.step_metrics["clip_fraction"][run], lw=0.8)
            ax.set_ylabel("fraction of tokens clipped")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(title or f"{config.delta.value} deltas, {config.loss.value} loss, "
                          f"{config.reward} reward, seed {config.seed}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return Path(path)


def plot_variance_vs_group_size(rows, path: Path, title: str | None = None) -> Path:
    """Save tr Cov of each delta mode's gradient estimator against G (`lab.exact.diagnose` rows) to `path`.

    Log-scale variance; filled markers are exact, hollow ones Monte Carlo estimates. The file (format
    from the suffix, `lab.figures.figure_files`) is written beside `path` under a temporary name and renamed over it when complete.
    """
    fig = Figure(figsize=(5.6, 3.8))
    ax = fig.subplots()
    for delta in dict.fromkeys(row.delta for row in rows):
        mine = sorted((row for row in rows if row.delta == delta), key=lambda row: row.group_size)
        line, = ax.plot([r.group_size for r in mine], [r.trace_cov for r in mine], label=delta, lw=1.2)
        for r in mine:
            ax.plot(r.group_size, r.trace_cov, "o", color=line.get_color(),
                    markerfacecolor="none" if r.samples else line.get_color())
    ax.set_yscale("log")
    ax.set_xlabel("group size G")
    ax.set_ylabel("tr Cov of the gradient estimator")
    ax.set_xticks(sorted({row.group_size for row in rows}))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, title="deltas (hollow: Monte Carlo)", title_fontsize=7)
    ax.set_title(title or "variance of the policy-gradient estimator", fontsize=10)
    fig.tight_layout()
    fmt = figure_format(path)  # .png, .pdf or .svg; signed, so the lab may replace it later
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format=fmt, metadata=figure_metadata(fmt))
    return Path(path)


def plot_epoch_series(epochs, series: dict[str, list[float]], path: Path, title: str | None = None) -> Path:
    """Save one panel per named series against the epoch (e.g. `lab trl`'s exact metrics) to `path` (PNG)."""
    fig = Figure(figsize=(3.4 * len(series), 3.2))
    axes = fig.subplots(1, len(series), squeeze=False)
    for ax, (name, values) in zip(axes[0], series.items()):
        ax.plot(epochs, values, lw=1.2)
        ax.set_xlabel("epoch")
        ax.set_title(name, fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return Path(path)
