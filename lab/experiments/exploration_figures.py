"""The exploration section's figures (imports matplotlib): success against init scale and entropy bonus,
entropy and P(optimal) curves with bands, pass@k and maj@k before and after, entropy against reward.

    band(epoch) = mean over seeds +- t_{0.975, n-1} * std over seeds / sqrt(n)     (lab.experiments.figures.mean_band)
    success     = Wilson 95% interval of the fraction of seeds optimal on every prompt
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from lab.experiments.exploration_results import EXPLORING, INIT_SCALES, STUCK, _key, _label, sampling_entropy, success
from lab.experiments.exploration_checks import CROSSING_KS, pass_at_k
from lab.experiments.figures import mean_band
from lab.experiments.intervals import probability_interval
from lab.files.temporaries import atomic_path

COLORS = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    return path


def _band(ax, x, curves, color, label, ls="-"):
    mean, low, high = mean_band(np.asarray(curves, dtype=float))
    ax.plot(x, mean, color=color, lw=1.5, ls=ls, label=label)
    ax.fill_between(x, low, high, color=color, alpha=0.18, lw=0)


def _probability_band(ax, x, curves, color, label, ls="-"):
    """Mean over seeds with a 95% percentile-bootstrap band per x (inside [0, 1], as the probabilities)."""
    curves = np.asarray(curves, dtype=float)
    bands = [probability_interval(curves[:, i]) for i in range(curves.shape[1])]
    ax.plot(x, [b.estimate for b in bands], color=color, lw=1.5, ls=ls, label=label)
    ax.fill_between(x, [b.low for b in bands], [b.high for b in bands], color=color, alpha=0.18, lw=0)


def _success_bars(ax, xs, intervals, color, label, offset=0.0):
    est = np.array([i.estimate for i in intervals])
    err = np.array([[i.estimate - i.low for i in intervals], [i.high - i.estimate for i in intervals]])
    ax.errorbar(np.asarray(xs) * (1 + offset), est, yerr=err, fmt="o-", color=color, capsize=3, lw=1.2,
                label=label, ms=4)


def plot_exploration(analysis: dict, out: Path) -> list[Path]:
    """Four PNGs into `out`; returns their paths."""
    records = analysis["records"]
    entropy = sampling_entropy(records)
    x = np.arange(entropy.shape[1]) * records.configs[0].steps
    return [figure(analysis, entropy, x, out) for figure in
            (_init_figure, _bonus_figure, _pass_at_k_figure, _entropy_reward_figure)]


def _init_figure(analysis: dict, entropy: np.ndarray, x: np.ndarray, out: Path) -> Path:
    """exploration_init.png: success, entropy and P(optimal) against the init scale."""
    records, runs = analysis["records"], analysis["runs"]
    optimal = records.epoch_metrics["optimal_prob"]
    fig = Figure(figsize=(15, 4.0))
    left, middle, right = fig.subplots(1, 3)
    combos = [(d, m) for d in ("raw", "centered", "normalized") for m in ("naive", "clipped")]
    for i, (delta, loss) in enumerate(combos):
        intervals = [success(records, runs[_key({"init_scale": s, "delta": delta, "loss": loss})])
                     for s in INIT_SCALES]
        _success_bars(left, INIT_SCALES, intervals, COLORS[i], f"{delta}, {loss}", offset=0.02 * (i - 2.5))
    left.set_xscale("log")
    left.set_xlabel("embedding init scale (1 = the lecture)")
    left.set_ylabel("fraction of seeds optimal on every prompt")
    left.legend(fontsize=7)
    for i, scale in enumerate(INIT_SCALES):
        r = runs[_key({"init_scale": scale, "delta": "centered", "loss": "clipped"})]
        _band(middle, x, entropy[r], COLORS[i], f"init {scale:g}")
        # heavily skewed across seeds (most stuck seeds near 1e-14, a few near 1): median and quartiles
        low, median, high = np.quantile(np.maximum(optimal[r], 1e-16), [0.25, 0.5, 0.75], axis=0)
        right.plot(x, median, color=COLORS[i], lw=1.5, label=f"init {scale:g}")
        right.fill_between(x, low, high, color=COLORS[i], alpha=0.18, lw=0)
    middle.axhline(np.log(records.state["embedding"].shape[-2]), color="k", ls=":", lw=0.8, label="uniform")
    middle.set_ylabel("mean entropy of the sampling policy (nats)")
    right.set_yscale("log")
    right.set_ylabel("optimal_prob: P(one sample is optimal), exact")
    for ax, band in ((middle, "mean and 95% t-band"), (right, "median and quartiles over seeds")):
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
        ax.set_title(f"centered deltas, clipped loss; {band}", fontsize=8)
    for ax in (left, middle, right):
        ax.grid(alpha=0.3)
    fig.suptitle(f"Exploration and success against the embedding's init scale ({analysis['seeds']} seeds)", fontsize=10)
    return _save(fig, out / "exploration_init.png")


def _bonus_figure(analysis: dict, entropy: np.ndarray, x: np.ndarray, out: Path) -> Path:
    """exploration_bonus.png: the entropy bonus at the lecture's initialisation."""
    records, runs = analysis["records"], analysis["runs"]
    fig = Figure(figsize=(10.4, 4.0))
    left, right = fig.subplots(1, 2)
    settings = [STUCK, *analysis["bonus"]]
    coefs = [s.get("entropy_coef", 0.0) for s in settings]
    _success_bars(left, range(len(coefs)), [success(records, runs[_key(s)]) for s in settings], COLORS[0],
                  "init 1, centered, clipped")
    left.set_xticks(range(len(coefs)), [f"{c:g}" for c in coefs])
    left.set_xlabel("entropy coefficient")
    left.set_ylabel("fraction of seeds optimal on every prompt")
    left.set_ylim(-0.05, 1.05)
    for i, s in enumerate(settings):
        _band(right, x, entropy[runs[_key(s)]], COLORS[i], f"coef {coefs[i]:g}")
    right.set_xlabel("step")
    right.set_ylabel("mean entropy of the sampling policy (nats)")
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.suptitle("Entropy bonus at the lecture's initialisation (mean and 95% t-band / Wilson)", fontsize=10)
    return _save(fig, out / "exploration_bonus.png")


def _pass_at_k_figure(analysis: dict, entropy: np.ndarray, x: np.ndarray, out: Path) -> Path:
    """exploration_pass_at_k.png: pass@k and maj@k before and after training."""
    fig = Figure(figsize=(15, 4.0))
    axes = fig.subplots(1, 3)
    for ax, (name, setting) in zip(axes, (("stuck", STUCK), ("exploring", EXPLORING))):
        curves = analysis["at_k"][_key(setting)]
        for color, metric in ((COLORS[0], "pass"), (COLORS[1], "maj")):
            _probability_band(ax, analysis["ks"], curves[f"{metric}_before"], color, f"{metric}@k before", ls="--")
            _probability_band(ax, analysis["ks"], curves[f"{metric}_after"], color, f"{metric}@k after")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_title(f"{name}: {_label(setting)}", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    wide = axes[2]
    for i, (name, key) in enumerate(analysis["at_k_settings"]):
        before, after = analysis["p_opt"][key]
        wide.plot(CROSSING_KS, pass_at_k(before).mean(axis=(0, 1)), color=COLORS[i], ls="--", label=f"{name} before")
        wide.plot(CROSSING_KS, pass_at_k(after).mean(axis=(0, 1)), color=COLORS[i], label=f"{name} after")
    wide.set_xscale("log")
    wide.set_xlabel("k")
    wide.set_title("mean pass@k = 1 - (1 - p)^k to k = 100000 (where the curves cross)", fontsize=8)
    wide.grid(alpha=0.3)
    wide.legend(fontsize=7)
    axes[0].set_ylabel("exact probability, mean over prompts")
    fig.suptitle("pass@k and maj@k before and after training (mean and 95% percentile-bootstrap band over seeds)",
                 fontsize=10)
    return _save(fig, out / "exploration_pass_at_k.png")


def _entropy_reward_figure(analysis: dict, entropy: np.ndarray, x: np.ndarray, out: Path) -> Path:
    """exploration_entropy_reward.png: entropy against reward, with its fit."""
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.subplots()
    for i, setting in enumerate(analysis["fit_settings"]):
        fit = analysis["fits"][_key(setting)]
        ax.scatter(fit.entropy, fit.reward, s=2, alpha=0.15, color=COLORS[i])
        h = np.linspace(fit.entropy.min(), fit.entropy.max(), 50)
        ax.plot(h, -fit.a * np.exp(h) + fit.b, color=COLORS[i], lw=1.5,
                label=f"init {setting['init_scale']:g}: a={fit.a:.2f}, b={fit.b:.2f}, R^2={fit.r2:.2f}")
    ax.set_xlabel("mean entropy of the sampling policy (nats)")
    ax.set_ylabel("mean reward of the epoch's samples")
    ax.set_title("Entropy against reward over training, fit R = -a exp(H) + b\n(centered, clipped; every seed and "
                 "epoch)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, out / "exploration_entropy_reward.png")
