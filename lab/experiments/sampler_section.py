"""RESULTS.md's section on what is sampled and from which policy: its verdicts, table text and figure, from
`lab.experiments.sampler_results.run_samplers`.

The trained comparisons are paired over seeds (every setting runs the same seeds) and read by the project's rules
(`lab.experiments.verdicts`: `above` against an effect of interest, `within` for a target held, each with the
smallest effect its design detects at 80% power). In the paragraphs a difference is `higher` (`lower`) when its 95%
paired t-interval lies above (below) 0, else `no difference detected`, beside that detectable effect. The exact
tables have no sampling error; the rule that reads them (`stale_answer`) is stated with it.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from lab.experiments.exploration_results import sampling_entropy
from lab.experiments.intervals import Interval, mean_interval, paired_interval, wilson_interval
from lab.experiments.sampler_results import CAP, LAG, TARGET
from lab.experiments.sweep import optimal_everywhere
from lab.experiments.verdicts import (FAILS, HOLDS, INCONCLUSIVE, PARTLY, UNDERPOWERED, Verdict, above, cells,
                                      detectable_shift, differences, within)
from lab.files.temporaries import atomic_path

LATE = 20
"""Epochs at the end over which the entropy's distance to its target is averaged."""
SUCCESS_EFFECT, KL_EFFECT, HOLD = 0.2, 0.25, 0.05
"""The effects of interest: 20 points more runs sorting every prompt; 0.25 nats more KL to the initial policy;
the entropy 'held' when its late mean distance to the target lies within HOLD nats."""


def both(first: Verdict, second: Verdict) -> str:
    """A claim of two parts: holds when both hold, does not hold when either fails, else the weaker reach."""
    answers = {first.answer, second.answer}
    if answers == {HOLDS}:
        return HOLDS
    return FAILS if FAILS in answers else UNDERPOWERED if UNDERPOWERED in answers else INCONCLUSIVE


def stale_answer(removed: dict, trades: dict) -> str:
    """The exact rule: holds when token truncation removes more than half of the uncorrected bias at every K >= 5
    and token masking trades bias for variance at every one; does not hold when truncation removes most at none;
    else partly."""
    if all(v > 0.5 for v in removed.values()) and all(trades.values()):
        return HOLDS
    return FAILS if not any(v > 0.5 for v in removed.values()) else PARTLY


def verdict_table(result: dict, g: dict, ok, kl, gap, removed: dict, trades: dict) -> list[str]:
    """The issue's four claims, one row each: `| claim | evidence | interval | detectable / needs | **answer** |`."""
    seeds = len(g["plain"])
    success = above(ok[g["dynamic"]], ok[g["plain"]], effect=SUCCESS_EFFECT)
    further = above(kl[g["synced"]], kl[g["frozen"]], effect=KL_EFFECT)
    closer = above(gap[g["fixed_entropy"]], gap[g["adaptive_entropy"]], effect=HOLD)
    held = within(gap[g["adaptive_entropy"]], margin=HOLD)
    exact = Verdict(stale_answer(removed, trades), Interval(math.nan, math.nan, math.nan, 0), 0.0, 0.5)
    return ["| claim (source) | evidence | interval (paired over seeds) | detectable / needs | verdict |",
            "| --- | --- | --- | --- | --- |",
            "| dynamic sampling makes the lecture's stuck setting sort (DAPO) | sorting every prompt: plain "
            f"{int(ok[g['plain']].sum())} of {seeds}, dynamic {int(ok[g['dynamic']].sum())} of {seeds}; success "
            "difference, dynamic minus plain " + cells(success),
            "| truncated IS removes most of a stale sampler's bias, masking trades bias for variance (TRL's modes; "
            "Yao et al. 2025) | token truncation removes " + ", ".join(f"{v:.0%} (K = {k})" for k, v in removed.items())
            + " of the bias; token masking trades at K = " + (", ".join(str(k) for k, t in trades.items() if t) or
                                                           "none") + " " + cells(exact, "exact"),
            "| a synced reference lets the policy move further than a frozen one at the same beta (TR-DPO) | final "
            "exact KL to pi_0, synced minus frozen (nats) " + cells(further),
            f"| adaptive entropy holds its target where a fixed coefficient does not (Skywork-OR1) | late distance to "
            f"the target {TARGET}: adaptive within {HOLD} ({held.answer}: {held.interval.text(3)}), fixed minus "
            f"adaptive ({closer.answer}) | {closer.interval.text(3)} | {closer.detectable:.3g} / {HOLD:g} | "
            f"**{both(held, closer)}** |"]


def detectable(a, b) -> float:
    """The smallest paired mean difference the seeds detect at 80% power (`lab.experiments.verdicts`)."""
    return detectable_shift(differences(a, b))


def verdict(a, b, better: str, worse: str) -> str:
    """The paired rule's answer for mean(a - b), with its interval and detectable effect."""
    interval = paired_interval(a, b)
    word = better if interval.low > 0 else worse if interval.high < 0 else "no difference detected"
    return f"{word}: {interval.text(3)} (detectable: {detectable(a, b):.3f})"


def trade_word(mask: tuple[float, float], truncate: tuple[float, float]) -> str:
    """The exact rule: masking trades bias for variance when its bias is above truncation's and its variance
    below; it dominates when both are below, is dominated when both are above."""
    bias_up, variance_down = mask[0] > truncate[0], mask[1] < truncate[1]
    return ("trades bias for variance" if bias_up and variance_down else "dominates" if
            variance_down else "is dominated" if bias_up else "has less bias and more variance")


def section_lines(result: dict) -> list[str]:
    records, groups, seeds = result["records"], result["groups"], result["seeds"]
    final, ok = records.final("mean_reward"), optimal_everywhere(records).astype(float)
    greedy = records.final("greedy_reward")
    g = {name: np.array(runs) for name, runs in groups.items()}
    drawn = records.epoch_metrics["groups_drawn"]
    prompts = records.prompts.shape[0]
    cost = drawn[g["dynamic"]].mean(axis=1) / prompts
    out = ["## What is sampled, and from which policy: dynamic sampling, stale samplers, a following reference, "
           "adaptive entropy", "", "![samplers](samplers.png)", "",
           f"{seeds} seeds per setting, paired; the lecture's stuck setting (centered deltas, clipped loss) unless "
           "stated. " + " ".join(__doc__.split("\n\n")[1].split()), "",
           "**Dynamic sampling (DAPO) in the stuck setting.** Success (final greedy optimal on every prompt, Wilson "
           f"95%): plain {wilson_interval(int(ok[g['plain']].sum()), seeds).text(2)}, with dynamic sampling (cap "
           f"{CAP}) {wilson_interval(int(ok[g['dynamic']].sum()), seeds).text(2)}; final greedy reward "
           "(the argmax response, mean over prompts: the kept batch's own mean reward favours groups with signal), "
           "dynamic minus plain, " + verdict(greedy[g["dynamic"]], greedy[g["plain"]], "higher", "lower")
           + ". Its cost: "
           f"{mean_interval(cost).text(2)} groups drawn per prompt and epoch over the run (1 without it); at the "
           f"first epoch the exact expected cost sum_b S_N(q_b) is {result['cost'].mean():.2f} groups against "
           f"{drawn[g['dynamic'], 0].mean():.2f} drawn (mean over seeds; claim 42). Under a group baseline each "
           "kept group's expected update is S_N times the plain one (claim 43): dynamic sampling reweighs the "
           "prompts, it does not turn any prompt's expected update.", ""]
    stale, removed, trades = stale_lines(result, final, g)
    out += stale
    kl = records.epoch_metrics["kl_initial_exact"][:, -1]
    ref = result["reference"]
    out += ["**A reference that follows the policy (TR-DPO, TRL's sync_ref_model), beta 0.1.** Final exact KL to "
            "the initial policy, synced minus frozen: " + verdict(kl[g["synced"]], kl[g["frozen"]],
                                                                   "moves further", "moves less far")
            + "; final mean reward, synced minus frozen: " + verdict(final[g["synced"]], final[g["frozen"]],
                                                                    "higher", "lower")
            + ". The exact iteration (claim 46; 3000 steps, tabular class): expected reward / optimum and KL to pi_0 "
            + ", ".join(f"{name} {r:.3f}, {k:.2f} nats" for name, (r, k) in ref.items())
            + ": a frozen reference ascends J_beta and stops at its optimum, a following one ascends E[r].", ""]
    entropy = sampling_entropy(records)
    gap = np.abs(entropy[:, -LATE:] - TARGET).mean(axis=1)
    out += [f"**Adaptive entropy (Skywork-OR1) against a fixed coefficient 0.03, target {TARGET} nats.** Mean "
            f"|H - {TARGET}| over the last {LATE} epochs: fixed {mean_interval(gap[g['fixed_entropy']]).text(3)}, "
            f"adaptive {mean_interval(gap[g['adaptive_entropy']]).text(3)}; fixed minus adaptive, "
            + verdict(gap[g["fixed_entropy"]], gap[g["adaptive_entropy"]], "adaptive holds its target closer",
                      "the fixed coefficient is closer") + ".", "", "The issue's claims, decided:", "",
            *verdict_table(result, g, ok, kl, gap, removed, trades)]
    return out


def stale_lines(result: dict, final: np.ndarray, g: dict) -> tuple[list[str], dict, dict]:
    """The exact table and the trained comparison; the share of bias token truncation removes and whether token
    masking trades bias for variance against it, per K >= 5."""
    bias = result["bias"]
    names = list(next(iter(bias["stale"].values())))
    out = [f"**Stale and mismatched samplers, exactly** (lab.exact.sampler_bias: one response's update at step 40 "
           "of the exact expected-update path, raw deltas; relative bias |u_mu - u_pi| / |u_pi|, and the variance "
           "against the on-policy one; bounds C_max = 3, TRL's default):", "",
           "| sampler | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for label, rows in (("stale, K = {}", bias["stale"]), ("mismatched, T_s = {}", bias["mismatch"])):
        for key, row in rows.items():
            out.append(f"| {label.format(key)} | " + " | ".join(f"{b:.3f} (var x{v:.2f})" for b, v in row.values())
                       + " |")
    out += ["", f"The sequence modes at K = {max(bias['stale'])} as a function of C_max (bias, variance x):", "",
            "| C_max | sequence-truncate | sequence-mask |", "| --- | --- | --- |",
            *(f"| {high:g} | {tb:.3f} (var x{tv:.2f}) | {mb:.3f} (var x{mv:.2f}) |"
              for high, (tb, tv, mb, mv) in bias["bounds"].items())]
    k = bias["stale"][max(bias["stale"])]
    removed = 1 - k["token-truncate"][0] / k["none"][0]
    out += ["", f"At K = {max(bias['stale'])}, token truncation removes {removed:.0%} of the uncorrected bias ("
            + ("most" if removed > 0.5 else "not most") + "); against sequence truncation, sequence masking "
            + trade_word(k["sequence-mask"], k["sequence-truncate"]) + "; against token truncation, token masking "
            + trade_word(k["token-mask"], k["token-truncate"]) + " (exact; per K in the table). The unbounded "
            "sequence weight has no bias (claim 44) at a variance that grows with K.", "",
            f"Trained (K = {LAG} optimizer steps, {LAG / result['records'].configs[0].steps:g} epochs behind): final "
            "mean reward, stale minus on-policy "
            + verdict(final[g["stale"]], final[g["plain"]], "higher", "lower") + "; token-truncate minus uncorrected "
            + verdict(final[g["stale_truncate"]], final[g["stale"]], "higher", "lower")
            + "; sequence-mask minus uncorrected " + verdict(final[g["stale_mask"]], final[g["stale"]], "higher",
                                                             "lower") + ".", ""]
    lags = [k for k in bias["stale"] if k >= 5]
    removed = {k: 1 - bias["stale"][k]["token-truncate"][0] / bias["stale"][k]["none"][0] for k in lags}
    trades = {k: trade_word(bias["stale"][k]["token-mask"], bias["stale"][k]["token-truncate"]) ==
              "trades bias for variance" for k in lags}
    return out, removed, trades


def plot_samplers(result: dict, path: Path) -> Path:
    """Four panels: mean reward (plain, dynamic, stale, corrected), exact KL to pi_0 (frozen, synced), entropy
    (fixed, adaptive), mean over seeds."""
    records, groups = result["records"], result["groups"]
    fig = Figure(figsize=(12, 3.6))
    axes = fig.subplots(1, 3)
    panels = [("mean_reward", ("plain", "dynamic", "stale", "stale_truncate", "stale_mask"), "mean reward"),
              ("kl_initial_exact", ("frozen", "synced"), "exact KL to pi_0"),
              ("entropy", ("fixed_entropy", "adaptive_entropy"), "entropy of the sampling policy")]
    for ax, (metric, names, label) in zip(axes, panels):
        values = sampling_entropy(records) if metric == "entropy" else records.epoch_metrics[metric]
        for name in names:
            ax.plot(np.nanmean(values[groups[name]], axis=0), label=name)
        if metric == "entropy":
            ax.axhline(TARGET, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    return Path(path)
