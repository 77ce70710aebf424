"""The DPO section of `lab reproduce`: GRPO with a frozen-reference KL penalty and DPO at the same beta.

    settings   GRPO (centered deltas, clipped, KL to the frozen initial policy), online DPO and offline DPO
               (sigmoid and IPO; argmax and Bradley-Terry), each over seeds 0..N-1, lecture's init and prompts
    measured   exactly each epoch (lab.training.optimum): kl_to_optimum = KL(pi_theta || pi*), objective_gap =
               J_beta(pi*) - J_beta(pi_theta); kl_exact (the exact KL to the reference, each epoch's first step)

Verdict rules (95% intervals: Student t over seeds for means, Welch t for differences; lab.experiments.intervals):
- "DPO keeps the KL to the reference finite at convergence", per DPO setting: growth = mean kl_exact over the
  last tenth of the epochs minus that over the tenth ending at two thirds. Holds (a plateau) if the interval of
  the growth lies inside +-PLATEAU x the final KL; does not hold (still growing) if it lies above +PLATEAU x the
  final KL; else inconclusive. (On this finite space every KL to a full-support reference is bounded, by
  -log min pi_ref; claim 28 says what bounds it under argmax preferences.)
- "GRPO with a KL penalty and DPO reach the same optimum", per DPO setting against GRPO: the Welch interval of
  the difference of final objective_gap. Holds if it lies inside +-SAME x GRPO's initial gap; does not hold if
  it lies wholly outside; else inconclusive.
- "DPO needs no online sampling", offline against online (same loss and preference; offline draws as many
  pairs per prompt as online can use, one per epoch): holds if the upper end of the interval of offline minus
  online final objective_gap is below SAME x the initial gap (offline is not worse), does not hold if the lower
  end is above it, else inconclusive.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lab.experiments.intervals import Interval, difference_interval, mean_interval
from lab.training.config import TrainConfig

BETA = 0.05
"""The beta of every setting: GRPO's KL weight and DPO's beta (the same J_beta, the same pi*)."""
EPOCH_FACTOR = 3
"""The section's runs last this many times the base's epochs (300 for the lecture's 100): long enough to tell a
plateau of the KL from growth."""
PLATEAU = 0.10
SAME = 0.10
FIGURE = "dpo.png"

SETTINGS = (
    ("GRPO + KL", dict(delta="centered", loss="clipped", kl_period=0, optimum_metrics=True)),
    ("online DPO, argmax", dict(loss="dpo", pairs="online")),
    ("online DPO, Bradley-Terry", dict(loss="dpo", pairs="online", preference="bradley-terry")),
    ("online IPO, argmax", dict(loss="dpo", pairs="online", dpo_loss="ipo")),
    ("offline DPO, argmax", dict(loss="dpo", pairs="offline")),
    ("offline DPO, Bradley-Terry", dict(loss="dpo", pairs="offline", preference="bradley-terry")),
    ("offline IPO, argmax", dict(loss="dpo", pairs="offline", dpo_loss="ipo")),
)
"""(label, overrides of the lecture's settings; beta = BETA, EPOCH_FACTOR x the epochs, and for offline pairs
as many pairs per prompt as epochs are added)."""

ONLINE_OF = {4: 1, 5: 2, 6: 3}
"""offline setting -> the online setting with the same loss and preference model."""


def dpo_configs(seeds: int, base: TrainConfig) -> tuple[list[TrainConfig], list[list[int]]]:
    """Every run of the section and, per setting, its run indices."""
    epochs = EPOCH_FACTOR * base.epochs
    offline = lambda overrides: {"pairs_per_prompt": epochs} if overrides.get("pairs") == "offline" else {}  # noqa: E731
    configs = [base.replace(**overrides, **offline(overrides), kl=BETA, epochs=epochs, seed=seed)
               for _, overrides in SETTINGS for seed in range(seeds)]
    return configs, [list(range(i * seeds, (i + 1) * seeds)) for i in range(len(SETTINGS))]


def epoch_kl(records) -> np.ndarray:
    """kl_exact at each epoch's first step (the policy the epoch starts from): float[run epoch]."""
    return records.step_metrics["kl_exact"][:, ::records.configs[0].steps]


def _text(interval: Interval, digits: int = 3) -> str:
    return f"{interval.estimate:.{digits}f} [{interval.low:.{digits}f}, {interval.high:.{digits}f}]"


def _inside(interval: Interval, margin: float) -> str:
    if -margin <= interval.low and interval.high <= margin:
        return "holds"
    return "does not hold" if interval.low > margin or interval.high < -margin else "inconclusive"


def plateau_verdict(records, runs: list[int]) -> tuple[Interval, float, str]:
    kl = epoch_kl(records)[runs]
    tenth = max(1, kl.shape[1] // 10)
    two_thirds = 2 * kl.shape[1] // 3
    growth = mean_interval(kl[:, -tenth:].mean(1) - kl[:, two_thirds - tenth:two_thirds].mean(1))
    final = float(kl[:, -1].mean())
    margin = PLATEAU * final
    verdict = ("holds" if -margin <= growth.low and growth.high <= margin else
               "does not hold" if growth.low > margin else "inconclusive")
    return growth, final, verdict


def dpo_markdown(records, groups: list[list[int]], seeds: int) -> list[str]:
    """The RESULTS.md section: a table per setting, then the verdicts on the course notes' statements."""
    e = records.epoch_metrics
    final = lambda name, runs: mean_interval(e[name][runs, -1])  # noqa: E731
    kl = epoch_kl(records)
    epochs = records.configs[0].epochs
    out = [f"Beta = {BETA} for every setting (GRPO's KL weight, DPO's beta: the same J_beta = E[r] - beta KL(pi || "
           f"pi_ref) and the same pi* = pi_ref exp(r / beta) / Z, pi_ref the initial policy); {epochs} epochs x "
           f"{records.configs[0].steps} steps, {seeds} seeds. Offline sets hold {epochs} pairs per prompt drawn "
           "from pi_ref before training, as many as online DPO can use (one per group and epoch). The exact "
           "measures are sums over the 125 responses of each prompt. Final = after the last epoch; mean "
           "over seeds [95% t].", "",
           "| setting | final mean reward | final greedy accuracy | KL to pi_ref (final) | KL(pi_theta \\|\\| pi*) "
           "first -> final | J_beta gap first -> final |", "| --- | --- | --- | --- | --- | --- |"]
    for (label, _), runs in zip(SETTINGS, groups):
        out.append(f"| {label} | {_text(final('mean_reward', runs), 2)} | {_text(final('greedy_accuracy', runs), 2)} "
                   f"| {_text(mean_interval(kl[runs, -1]), 2)} | {e['kl_to_optimum'][runs, 0].mean():.2f} -> "
                   f"{_text(final('kl_to_optimum', runs), 2)} | {e['objective_gap'][runs, 0].mean():.3f} -> "
                   f"{_text(final('objective_gap', runs))} |")
    initial_gap = float(e["objective_gap"][groups[0], 0].mean())
    margin = SAME * initial_gap
    rows = []
    for (label, _), runs in list(zip(SETTINGS, groups))[1:]:
        growth, last, verdict = plateau_verdict(records, runs)
        rows.append((f"DPO keeps the KL to the reference finite at convergence ({label})",
                     f"growth of the KL over the last third, +-{PLATEAU:.0%} of the final KL {last:.2f}",
                     _text(growth), verdict))
    for (label, _), runs in list(zip(SETTINGS, groups))[1:]:
        gap = difference_interval(e["objective_gap"][runs, -1], e["objective_gap"][groups[0], -1])
        rows.append((f"GRPO with a KL penalty and DPO reach the same optimum ({label})",
                     f"final J_beta gap, {label} minus GRPO, within +-{margin:.3f}", _text(gap), _inside(gap, margin)))
    for offline, online in ONLINE_OF.items():
        gap = difference_interval(e["objective_gap"][groups[offline], -1], e["objective_gap"][groups[online], -1])
        verdict = "holds" if gap.high < margin else "does not hold" if gap.low > margin else "inconclusive"
        rows.append((f"DPO needs no online sampling ({SETTINGS[offline][0]} against {SETTINGS[online][0]})",
                     f"final J_beta gap, offline minus online, below {margin:.3f}", _text(gap), verdict))
    out += ["", "| the course notes say | decided by (rule in `lab/experiments/dpo_results.py`) | 95% interval | "
            "verdict |", "| --- | --- | --- | --- |"]
    out += [f"| {claim} | {rule} | {numbers} | **{verdict}** |" for claim, rule, numbers, verdict in rows]
    return out


def plot_dpo(records, groups: list[list[int]], path: Path, subtitle: str) -> Path:
    """Five panels against epochs, one mean curve per setting: reward, success, KL to pi_ref, KL to pi*, gap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("mean_reward", "mean reward"), ("greedy_accuracy", "greedy accuracy (success)"),
              ("kl_exact", "KL(pi_theta || pi_ref)"), ("kl_to_optimum", "KL(pi_theta || pi*)"),
              ("objective_gap", "J_beta(pi*) - J_beta(pi_theta)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6))
    for axis, (name, title) in zip(axes, panels):
        values = epoch_kl(records) if name == "kl_exact" else records.epoch_metrics[name]
        for (label, _), runs in zip(SETTINGS, groups):
            axis.plot(np.arange(values.shape[1]), np.nanmean(values[runs], axis=0), label=label, lw=1.2)
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("epoch")
        if name in ("kl_to_optimum", "objective_gap"):
            axis.set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.suptitle(subtitle, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
