"""The DPO section of `lab reproduce`: where GRPO with a KL penalty and DPO go, exactly, then how far sampled runs get.

    exact      per seed's reference and prompt (`lab.experiments.dpo_exact`): the objective each method's expected
               update ascends, where its exact expected-update flow ends (`lab.exact.update_flow`, to stated
               tolerances), that end's distance from pi*, and the closed form beside it where there is one
    settings   GRPO (centered deltas, clipped, KL to the frozen initial policy) with k3 in the loss (the lab's and
               TRL's default), k2 in the loss and k1 in the reward; online and offline DPO (sigmoid and IPO; argmax
               and Bradley-Terry), each over seeds 0..N-1, the lecture's init and prompts
    measured   exactly each epoch (lab.training.optimum): kl_to_optimum = KL(pi_theta || pi*), objective_gap =
               J_beta(pi*) - J_beta(pi_theta); kl_exact (the exact KL to the reference, each epoch's first step)

Verdict rules (95% intervals: Student t over seeds for means; every comparison of two settings is paired by seed,
`lab.experiments.intervals.seed_difference`, since all settings run seeds 0..N-1):
- exact, per DPO method: "the implicit KL stops rising before -log pi_ref(top set)" (the course notes' "settles at a
  finite value", stated so that it can be false), decided at the end of the exact expected-update flow: holds if the
  flow converges on every reference and prompt at a KL to pi_ref below -log pi_ref(top set) (a finite fixed point:
  Bradley-Terry's pi*, IPO's minimiser); does not hold if it converges on none (argmax DPO: its update decays only
  like 1 / time, the losers' mass falls to 0 and the KL reaches -log pi_ref(y) of the response it collapses onto);
  else inconclusive.
- budget, per DPO setting: "the sampled KL has stopped rising by the end": growth = mean kl_exact over the last
  tenth of the epochs minus that over the tenth ending at two thirds; holds if its interval lies inside +-PLATEAU x
  the final KL; does not hold if above +PLATEAU x the final KL; else inconclusive.
- budget: "GRPO with k2 in the loss / k1 in the reward ends closer to pi* than with k3 in the loss": the paired
  interval of final kl_to_optimum, k3 minus the other, above 0 -> holds, below 0 -> does not hold.
- budget, per DPO setting: "DPO gets as close to pi* as GRPO with k1 in the reward (both ascend J_beta)": paired
  interval of the final objective_gap difference within +-SAME x the initial gap -> holds, wholly outside -> does
  not hold, else inconclusive.
- budget: "DPO needs no online sampling", offline against online (same loss and preference; offline draws as
  many pairs per prompt as online can use, one per epoch): holds if the upper end of the paired interval of
  offline minus online final objective_gap is below SAME x the initial gap, does not hold if the lower end is
  above it, else inconclusive.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lab.experiments.dpo_exact import exact_markdown
from lab.experiments.intervals import Interval, mean_interval, seed_difference
from lab.training.config import TrainConfig

BETA = 0.05
"""The beta of every setting: GRPO's KL weight and DPO's beta."""
EPOCH_FACTOR = 3
"""The section's runs last this many times the base's epochs (300 for the lecture's 100): long enough to tell a
plateau of the KL from growth."""
PLATEAU = 0.10
SAME = 0.10

GRPO = dict(delta="centered", loss="clipped", kl_period=0, optimum_metrics=True)
SETTINGS = (
    ("GRPO, k3 in the loss", GRPO),
    ("GRPO, k2 in the loss", dict(GRPO, kl_estimator="k2")),
    ("GRPO, k1 in the reward", dict(GRPO, kl_estimator="k1", kl_in="reward")),
    ("online DPO, argmax", dict(loss="dpo", pairs="online")),
    ("online DPO, Bradley-Terry", dict(loss="dpo", pairs="online", preference="bradley-terry")),
    ("online IPO, argmax", dict(loss="dpo", pairs="online", dpo_loss="ipo")),
    ("offline DPO, argmax", dict(loss="dpo", pairs="offline")),
    ("offline DPO, Bradley-Terry", dict(loss="dpo", pairs="offline", preference="bradley-terry")),
    ("offline IPO, argmax", dict(loss="dpo", pairs="offline", dpo_loss="ipo")),
)
"""(label, overrides of the lecture's settings; beta = BETA, EPOCH_FACTOR x the epochs, and for offline pairs
as many pairs per prompt as epochs are added)."""

GRPO_SETTINGS = 3
"""The first settings are GRPO's; the one with k1 in the reward (index 2) ascends J_beta, as DPO does."""
ONLINE_OF = {6: 3, 7: 4, 8: 5}
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


def _sign(interval: Interval) -> str:
    return "holds" if interval.low > 0 else "does not hold" if interval.high < 0 else "inconclusive"


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
    """The RESULTS.md section: the exact fixed points, a table per setting, then the verdicts."""
    e = records.epoch_metrics
    final = lambda name, runs: mean_interval(e[name][runs, -1])  # noqa: E731
    seeds_of = lambda runs: [records.configs[r].seed for r in runs]  # noqa: E731
    paired = lambda name, a, b: seed_difference(e[name][a, -1], e[name][b, -1], seeds_of(a), seeds_of(b))  # noqa: E731
    kl = epoch_kl(records)
    epochs = records.configs[0].epochs
    exact, rows = exact_markdown([records.configs[r] for r in groups[0]], records.prompts, BETA)
    out = [*exact, "", f"How far sampled runs get in a budget, a separate question: beta = {BETA} for every setting "
           f"(GRPO's KL weight, DPO's beta), pi_ref the initial policy; {epochs} epochs x {records.configs[0].steps} "
           f"steps, {seeds} seeds. Offline sets hold {epochs} pairs per prompt drawn from pi_ref before training, "
           "as many as online DPO can use (one per group and epoch). The exact measures are sums over the 125 "
           "responses of each prompt. Final = after the last epoch; mean over seeds [95% t].", "",
           "| setting | final mean reward | final greedy accuracy | KL to pi_ref (final) | KL(pi_theta \\|\\| pi*) "
           "first -> final | J_beta gap first -> final |", "| --- | --- | --- | --- | --- | --- |"]
    for (label, _), runs in zip(SETTINGS, groups):
        out.append(f"| {label} | {_text(final('mean_reward', runs), 2)} | {_text(final('greedy_accuracy', runs), 2)} "
                   f"| {_text(mean_interval(kl[runs, -1]), 2)} | {e['kl_to_optimum'][runs, 0].mean():.2f} -> "
                   f"{_text(final('kl_to_optimum', runs), 2)} | {e['objective_gap'][runs, 0].mean():.3f} -> "
                   f"{_text(final('objective_gap', runs))} |")
    initial_gap = float(e["objective_gap"][groups[0], 0].mean())
    margin = SAME * initial_gap
    named = list(zip(SETTINGS, groups))
    for (label, _), runs in named[GRPO_SETTINGS:]:
        growth, last, verdict = plateau_verdict(records, runs)
        rows.append((f"the sampled KL has stopped rising by the end of the budget ({label})",
                     f"growth of the KL over the last third, +-{PLATEAU:.0%} of the final KL {last:.2f}",
                     _text(growth), verdict))
    for (label, _), runs in named[1:GRPO_SETTINGS]:
        closer = paired("kl_to_optimum", groups[0], runs)
        rows.append((f"GRPO with {label.split(', ')[1]} ends closer to pi* than with k3 in the loss",
                     "final KL(pi_theta || pi*), k3 in the loss minus this, paired by seed, above 0", _text(closer, 2),
                     _sign(closer)))
    for (label, _), runs in named[GRPO_SETTINGS:]:
        gap = paired("objective_gap", runs, groups[2])
        rows.append((f"DPO gets as close to pi* as GRPO with k1 in the reward after the budget ({label})",
                     f"final J_beta gap, {label} minus GRPO k1 in the reward, paired by seed, within +-{margin:.3f}",
                     _text(gap), _inside(gap, margin)))
    for offline, online in ONLINE_OF.items():
        gap = paired("objective_gap", groups[offline], groups[online])
        verdict = "holds" if gap.high < margin else "does not hold" if gap.low > margin else "inconclusive"
        rows.append((f"DPO needs no online sampling ({SETTINGS[offline][0]} against {SETTINGS[online][0]})",
                     f"final J_beta gap, offline minus online, paired by seed, below {margin:.3f}", _text(gap), verdict))
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
