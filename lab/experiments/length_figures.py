"""The length-bias figure: per setting, the paired per-epoch difference of the sampled runs (top) beside
the exact expected E[|o| | wrong] of the expected-gradient flow (bottom). Pure matplotlib (Agg)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from lab.experiments.intervals import paired_interval
from lab.experiments.length_bias import DELTAS, DR_GRPO, SETTINGS

matplotlib.use("Agg")

MIN_PAIRS = 5
"""An epoch's paired difference is drawn only where at least this many seeds have wrong samples under both
divisors (late in Dr. GRPO's setting most runs are always right, and two pairs give a band of +-20 tokens)."""


def _panels() -> list[tuple[str, list[int]]]:
    """(title, setting indices) per column: one per delta mode of the lecture task, then Dr. GRPO's setting."""
    columns = [(f"{delta} deltas", [i for i, s in enumerate(SETTINGS) if s.overrides.get("delta") == delta
                                    and s.task != DR_GRPO]) for delta in DELTAS]
    return columns + [("0/1 reward, vocab 2, cap 6, centered", [i for i, s in enumerate(SETTINGS) if s.task == DR_GRPO])]


def plot_length_bias(records: dict, pairs, flows: dict, path: Path, suptitle: str) -> Path:
    """Top: mean over seeds of incorrect_length(1/|o|) - incorrect_length(C), paired by seed, 95% paired-t band,
    one line per init scale. Bottom: the exact flow's E[|o| | wrong], 1/|o| solid and C dashed."""
    columns = _panels()
    fig = Figure(figsize=(3.3 * len(columns), 6.0))
    axes = fig.subplots(2, len(columns), squeeze=False)
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for column, (title, indices) in enumerate(columns):
        top, bottom = axes[0, column], axes[1, column]
        for color, i in zip(colors, indices):
            setting, (biased, unbiased) = SETTINGS[i], pairs[i]
            lengths = records[setting.task].epoch_metrics["incorrect_length"]
            bands = [paired_interval(lengths[biased, e], lengths[unbiased, e]) for e in range(lengths.shape[1])]
            epochs = np.arange(lengths.shape[1])
            shown = np.array([b.n >= MIN_PAIRS for b in bands])
            value = lambda get: np.where(shown, [get(b) for b in bands], np.nan)  # noqa: E731
            top.plot(epochs, value(lambda b: b.estimate), color=color, lw=1.3,
                     label=f"init {setting.overrides['init_scale']:g}")
            top.fill_between(epochs, value(lambda b: b.low), value(lambda b: b.high), color=color, alpha=0.2)
            flow = flows[setting.task]
            keep = ~np.isnan(flow[biased, 0])
            if keep.any():
                steps = np.arange(flow.shape[1])
                bottom.plot(steps, flow[np.array(biased)[keep]].mean(0), color=color, lw=1.3,
                            label=f"init {setting.overrides['init_scale']:g}, 1/|o|")
                bottom.plot(steps, flow[np.array(unbiased)[keep]].mean(0), color=color, lw=1.3, ls="--",
                            label=f"init {setting.overrides['init_scale']:g}, C")
        top.axhline(0, color="black", lw=0.7)
        top.set_title(title, fontsize=9)
        top.set_xlabel("epoch", fontsize=8)
        bottom.set_xlabel("epoch", fontsize=8)
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6.5)
    axes[0, 0].set_ylabel(f"sampled wrong length, 1/|o| - C\n(paired by seed, 95% t; >= {MIN_PAIRS} pairs)",
                          fontsize=8)
    axes[1, 0].set_ylabel("exact E[|o| | wrong], expected flow", fontsize=8)
    fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return Path(path)
