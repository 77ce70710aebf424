"""The DPO section of `lab reproduce`: where GRPO with a KL penalty and DPO go, exactly, then how far sampled runs get.

    exact      per seed's reference and prompt (`lab.experiments.dpo_exact`): the objective each method's expected
               update ascends, where its exact expected-update flow ends (`lab.exact.update_flow`, to stated
               tolerances), that end's distance from pi*, and the closed form beside it where there is one
    settings   GRPO (centered deltas, clipped, KL to the frozen initial policy) with k3 in the loss (the lab's and
               TRL's default), k2 in the loss and k1 in the reward; online and offline DPO (sigmoid and IPO; argmax
               and Bradley-Terry), each over seeds 0..N-1, the lecture's init and prompts
    measured   exactly each epoch (lab.training.optimum): kl_to_optimum = KL(pi_theta || pi*), objective_gap =
               J_beta(pi*) - J_beta(pi_theta); kl_exact (the exact KL to the reference, each epoch's first step)

Every setting names what it ascends and at which beta' (lab.training.objective): the policy-gradient runs in the
loss take beta = BETA s / C (s = (G-1)/G, C the response length), so that every GRPO setting and DPO aim at beta'
= BETA with the same reference, pi_0 frozen; the distance to pi*_BETA of a GRPO run comes from its exact
reward_exact and kl_initial_exact (`optimum_distance`), a DPO run's is its own kl_to_optimum.

Verdict rules (lab/experiments/verdicts.py, tested on planted effects; 95% intervals, every comparison paired by
seed since all settings run seeds 0..N-1; beside each, the smallest effect the design detects at 80% power):
- exact, per DPO method: "the implicit KL stops rising before -log pi_ref(top set)" (the course notes' "settles at a
  finite value", stated so that it can be false), decided at the end of the exact expected-update flow: holds if the
  flow converges on every reference and prompt at a KL to pi_ref below -log pi_ref(top set) (a finite fixed point:
  Bradley-Terry's pi*, IPO's minimiser); does not hold if it converges on none (argmax DPO: its update decays only
  like 1 / time, the losers' mass falls to 0 and the KL reaches -log pi_ref(y) of the response it collapses onto);
  else inconclusive.
- budget, per DPO setting: "the sampled KL has stopped rising by the end": `stopped` on the growth of each seed's
  exact KL over the late window (the mean over the last tenth of the epochs minus that over the tenth ending at two
  thirds, EPOCH_FACTOR x the base's budget): does not hold if the growth is significantly above 0; holds if its
  interval lies below PLATEAU x the final KL.
- budget: "GRPO with k2 in the loss / k1 in the reward ends closer to pi* than with k3 in the loss": `above` on the
  final KL(pi || pi*_BETA), k3 in the loss minus the other; effect of interest SAME x the initial distance.
- budget, per DPO setting: "DPO gets as close to pi* as GRPO with k1 in the reward (both ascend J_beta)": `within`
  +-SAME x the initial gap on the final objective_gap difference.
- budget: "DPO needs no online sampling", offline against online (same loss and preference; offline draws as
  many pairs per prompt as online can use, one per epoch): `below` SAME x the initial gap on offline minus online
  final objective_gap (effect of interest the same).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from lab.experiments import verdicts as v
from lab.experiments.dpo_exact import exact_markdown, reference_tables
from lab.experiments.intervals import Interval, mean_interval
from lab.training.config import TrainConfig
from lab.training.objective import effective_beta, objective

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

HORIZON = 3
"""C: the lecture's prompts' (and responses') length, which beta' of a KL in the loss scales with."""
GRPO_SETTINGS = 3
"""The first settings are GRPO's; the one with k1 in the reward (index 2) ascends J_beta, as DPO does."""
ONLINE_OF = {6: 3, 7: 4, 8: 5}
"""offline setting -> the online setting with the same loss and preference model."""


def matched_kl(config: TrainConfig, horizon: int = HORIZON) -> float:
    """The beta to give `config` so that its beta' is BETA (beta' is linear in beta; DPO's beta is its own)."""
    if config.loss.value == "dpo":
        return BETA
    return BETA * BETA / effective_beta(config.replace(kl=BETA), horizon)


def dpo_configs(seeds: int, base: TrainConfig) -> tuple[list[TrainConfig], list[list[int]]]:
    """Every run of the section and, per setting, its run indices (every setting at beta' = BETA)."""
    epochs = EPOCH_FACTOR * base.epochs
    offline = lambda overrides: {"pairs_per_prompt": epochs} if overrides.get("pairs") == "offline" else {}  # noqa: E731
    configs = []
    for _, overrides in SETTINGS:
        config = base.replace(**overrides, **offline(overrides), kl=BETA, epochs=epochs)
        configs += [config.replace(kl=matched_kl(config), seed=seed) for seed in range(seeds)]
    return configs, [list(range(i * seeds, (i + 1) * seeds)) for i in range(len(SETTINGS))]


def optimum_distance(records, beta: float = BETA) -> np.ndarray:
    """KL(pi_theta || pi*_beta) after each epoch, float[run epoch], mean over prompts: a DPO run's kl_to_optimum (its
    beta is beta), a GRPO run's from its exact E[r] and KL to pi_0 (its reference: kl_period 0), claim 26:
    KL(pi || pi*) = KL(pi || pi_ref) - E_pi[r] / beta + log Z_beta, log Z_beta from each seed's pi_0 exactly."""
    e = records.epoch_metrics
    ref, rewards = reference_tables(records.configs, torch.as_tensor(records.prompts))
    log_z = torch.logsumexp(ref + rewards / beta, dim=-1).mean(-1).numpy()  # float[run]
    dpo = np.array([c.loss.value == "dpo" for c in records.configs])
    own = e["kl_to_optimum"] if "kl_to_optimum" in e else np.full_like(e["reward_exact"], np.nan)
    derived = e["kl_initial_exact"] - e["reward_exact"] / beta + log_z[:, None]
    return np.where(dpo[:, None], own, derived)


def epoch_kl(records) -> np.ndarray:
    """kl_exact at each epoch's first step (the policy the epoch starts from): float[run epoch]."""
    return records.step_metrics["kl_exact"][:, ::records.configs[0].steps]


def _text(interval: Interval, digits: int = 3) -> str:
    return f"{interval.estimate:.{digits}f} [{interval.low:.{digits}f}, {interval.high:.{digits}f}]"


def plateau_verdict(records, runs: list[int]) -> tuple[v.Verdict, float]:
    """`stopped` on each seed's growth of the exact KL over the late window; the final KL it is judged against."""
    kl = epoch_kl(records)[runs]
    tenth = max(1, kl.shape[1] // 10)
    two_thirds = max(tenth, 2 * kl.shape[1] // 3)
    final = float(kl[:, -1].mean())
    late, early = kl[:, -tenth:].mean(1), kl[:, two_thirds - tenth:two_thirds].mean(1)
    return v.stopped(late, early, tolerance=max(PLATEAU * final, 1e-12)), final


def _row(claim: str, rule: str, verdict: v.Verdict, digits: int = 3) -> str:
    return f"| {claim} | {rule} " + v.cells(verdict, digits=digits)


def dpo_markdown(records, groups: list[list[int]], seeds: int) -> list[str]:
    """The RESULTS.md section: the exact fixed points, a table per setting, then the verdicts."""
    e = records.epoch_metrics
    distance = optimum_distance(records)
    gap = BETA * distance  # J_beta(pi*) - J_beta(pi_theta), claim 26
    final = lambda values, runs: mean_interval(values[runs, -1])  # noqa: E731
    seeds_of = lambda runs: [records.configs[r].seed for r in runs]  # noqa: E731
    paired = lambda values, a, b: v.pair(values[a, -1], seeds_of(a), values[b, -1], seeds_of(b))  # noqa: E731
    kl = epoch_kl(records)
    epochs = records.configs[0].epochs
    horizon = records.prompts.shape[1]
    exact, exact_rows = exact_markdown([records.configs[r] for r in groups[0]], records.prompts, BETA)
    out = [*exact, "", f"How far sampled runs get in a budget, a separate question: every setting aims at beta' = {BETA} "
           "with pi_ref the initial policy, frozen (a KL in the loss takes beta = beta' s / C, lab.training.objective; "
           f"the objective column says what each ascends); {epochs} epochs x {records.configs[0].steps} "
           f"steps, {seeds} seeds. Offline sets hold {epochs} pairs per prompt drawn from pi_ref before training, "
           "as many as online DPO can use (one per group and epoch). The exact measures are sums over the 125 "
           f"responses of each prompt; pi* = pi*_{BETA:g}. Final = after the last epoch; mean over seeds [95% t].", "",
           "| setting | objective ascended (beta', reference) | final mean reward | final greedy accuracy | KL to "
           "pi_ref (final) | KL(pi_theta \\|\\| pi*) first -> final | J_beta gap first -> final |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for (label, _), runs in zip(SETTINGS, groups):
        config = records.configs[runs[0]]
        ascends = objective(config, horizon)
        out.append(f"| {label} | {ascends.text}; beta' {ascends.beta_prime:.3g} (beta {config.kl:.3g}), "
                   f"{ascends.reference} | {_text(final(e['mean_reward'], runs), 2)} | "
                   f"{_text(final(e['greedy_accuracy'], runs), 2)} | {_text(mean_interval(kl[runs, -1]), 2)} | "
                   f"{distance[runs, 0].mean():.2f} -> {_text(final(distance, runs), 2)} | "
                   f"{gap[runs, 0].mean():.3f} -> {_text(final(gap, runs))} |")
    initial_gap = float(gap[groups[0], 0].mean())
    margin = SAME * initial_gap
    named = list(zip(SETTINGS, groups))
    rows = [f"| {claim} | {rule} | {numbers} | exact (no seeds) | **{answer}** |"
            for claim, rule, numbers, answer in exact_rows]
    for (label, _), runs in named[GRPO_SETTINGS:]:
        verdict, last = plateau_verdict(records, runs)
        rows.append(_row(f"the sampled KL has stopped rising by the end of the budget ({label})",
                         "growth of each seed's exact KL over the late window (last tenth minus the tenth ending at "
                         f"two thirds), paired: above 0 does not hold, below {PLATEAU:.0%} of the final KL {last:.2f} "
                         "holds", verdict))
    for (label, _), runs in named[1:GRPO_SETTINGS]:
        effect = SAME * float(distance[groups[0], 0].mean())
        rows.append(_row(f"GRPO with {label.split(', ')[1]} ends closer to pi* than with k3 in the loss (beta' "
                         f"{BETA} both)", "final KL(pi_theta || pi*), k3 in the loss minus this, paired by seed, above "
                         f"0; effect of interest {effect:.2f} ({SAME:.0%} of the initial distance)",
                         v.above(*paired(distance, groups[0], runs), effect=effect)))
    for (label, _), runs in named[GRPO_SETTINGS:]:
        rows.append(_row(f"DPO gets as close to pi* as GRPO with k1 in the reward after the budget ({label})",
                         f"final J_beta gap, {label} minus GRPO k1 in the reward, paired by seed, within +-{margin:.3f}",
                         v.within(*paired(gap, runs, groups[2]), margin=margin)))
    for offline, online in ONLINE_OF.items():
        rows.append(_row(f"DPO needs no online sampling ({SETTINGS[offline][0]} against {SETTINGS[online][0]})",
                         f"final J_beta gap, offline minus online, paired by seed, below {margin:.3f}",
                         v.below(*paired(gap, groups[offline], groups[online]), effect=margin, margin=margin)))
    out += ["", "| the course notes say | decided by (rule in `lab/experiments/verdicts.py`) | 95% interval | "
            "detectable at 80% power / needed | verdict |", "| --- | --- | --- | --- | --- |", *rows]
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
        values = (epoch_kl(records) if name == "kl_exact" else optimum_distance(records) if name == "kl_to_optimum" else
                  BETA * optimum_distance(records) if name == "objective_gap" else records.epoch_metrics[name])
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
