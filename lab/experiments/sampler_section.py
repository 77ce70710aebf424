"""RESULTS.md's section on what is sampled and from which policy: its verdicts, table text and figure, from
`lab.experiments.sampler_results.run_samplers`.

Each verdict is a paired comparison over seeds (every setting runs the same seeds) with a rule that can give each
answer: `better` when the 95% paired t-interval of the difference lies above 0, `worse` below, `no difference
detected` when it holds 0, beside the smallest effect the seeds could detect, MDE = (t_{0.975} + t_{0.8}) s_d /
sqrt(n) (80% power, two-sided 5%). The exact tables have no sampling error; their rule is stated with them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from lab.experiments.exploration_results import sampling_entropy
from lab.experiments.intervals import mean_interval, paired_interval, t_quantile, wilson_interval
from lab.experiments.sampler_results import CAP, LAG, TARGET
from lab.experiments.sweep import optimal_everywhere
from lab.files.temporaries import atomic_path

LATE = 20
"""Epochs at the end over which the entropy's distance to its target is averaged."""
SUCCESS_MARGIN, KL_MARGIN, HOLD = 0.2, 0.05, 0.05
"""A claim of an effect 'does not hold' when its interval's upper end is below its margin (a share of runs
sorting: the Wilson interval of the success difference's bound, since a paired t-interval of 0/1 outcomes that
never differ is a point; nats of KL); the entropy is 'held' when its late mean distance to the target is below
HOLD nats."""


def claim_row(claim: str, evidence: str, low: float, high: float, margin: float) -> str:
    """holds: the interval lies above 0; does not hold: its upper end is below the margin; else inconclusive."""
    word = "holds" if low > 0 else "does not hold" if high < margin else "inconclusive"
    return f"| {claim} | {evidence} | **{word}** |"


def verdict_table(result: dict, g: dict, ok, kl, gap, removed: dict, trades: dict) -> list[str]:
    """The issue's four claims, one row each (module docstring for the trained rows' rule)."""
    success = paired_interval(ok[g["dynamic"]], ok[g["plain"]])
    # the largest gain the seeds leave possible: dynamic's Wilson upper end minus plain's lower end
    possible = wilson_interval(int(ok[g["dynamic"]].sum()), len(g["dynamic"])).high - \
        wilson_interval(int(ok[g["plain"]].sum()), len(g["plain"])).low
    further = paired_interval(kl[g["synced"]], kl[g["frozen"]])
    closer = paired_interval(gap[g["fixed_entropy"]], gap[g["adaptive_entropy"]])
    adaptive = mean_interval(gap[g["adaptive_entropy"]])
    held = closer.low > 0 and adaptive.high < HOLD
    entropy_word = "holds" if held else "does not hold" if adaptive.low > HOLD or closer.high < 0 else "inconclusive"
    most, trade = all(v > 0.5 for v in removed.values()), all(trades.values())
    stale_word = "holds" if most and trade else "does not hold" if not any(v > 0.5 for v in removed.values()) \
        else "partly"
    return ["| claim (source) | evidence (paired over seeds unless exact) | verdict |", "| --- | --- | --- |",
            claim_row("dynamic sampling makes the lecture's stuck setting sort (DAPO)", "success difference "
                      f"{success.text(2)} (paired t), at most {possible:+.2f} (Wilson ends); does not hold below "
                      f"+{SUCCESS_MARGIN}", success.low, possible, SUCCESS_MARGIN),
            f"| truncated IS removes most of a stale sampler's bias, masking trades bias for variance (TRL's "
            f"modes; Yao et al. 2025) | exact: token truncation removes "
            + ", ".join(f"{v:.0%} (K = {k})" for k, v in removed.items()) + "; masking trades at K = "
            + (", ".join(str(k) for k, t in trades.items() if t) or "none") + f" | **{stale_word}** |",
            claim_row("a synced reference lets the policy move further than a frozen one at the same beta (TR-DPO)",
                      f"final exact KL to pi_0, synced minus frozen {further.text(3)} nats, detectable "
                      f"{detectable(kl[g['synced']], kl[g['frozen']]):.3f}; does not hold below +{KL_MARGIN}",
                      further.low, further.high, KL_MARGIN),
            f"| adaptive entropy holds its target where a fixed coefficient does not (Skywork-OR1) | late distance "
            f"to the target {TARGET}: adaptive {adaptive.text(3)} (held: below {HOLD}), fixed minus adaptive "
            f"{closer.text(3)} | "
            f"**{entropy_word}** |"]


def detectable(a, b) -> float:
    """The smallest paired mean difference the seeds detect with 80% power (two-sided 5%)."""
    diff = np.asarray(a, float) - np.asarray(b, float)
    n = len(diff)
    if n < 2:
        return math.nan
    return (t_quantile(0.975, n - 1) + t_quantile(0.8, n - 1)) * float(diff.std(ddof=1)) / math.sqrt(n)


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
           "stated. Rule: " + __doc__.split("Each verdict is ")[1].split(" The exact")[0].replace("\n", " "), "",
           "**Dynamic sampling (DAPO) in the stuck setting.** Success (final greedy optimal on every prompt, Wilson "
           f"95%): plain {wilson_interval(int(ok[g['plain']].sum()), seeds).text(2)}, with dynamic sampling (cap "
           f"{CAP}) {wilson_interval(int(ok[g['dynamic']].sum()), seeds).text(2)}; final greedy reward "
           "(the argmax response, mean over prompts: the kept batch's own mean reward favours groups with signal), "
           "dynamic minus plain, " + verdict(greedy[g["dynamic"]], greedy[g["plain"]], "higher", "lower")
           + ". Its cost: "
           f"{mean_interval(cost).text(2)} groups drawn per prompt and epoch over the run (1 without it); at the "
           f"first epoch the exact expected cost sum_b S_N(q_b) is {result['cost'].mean():.2f} groups against "
           f"{drawn[g['dynamic'], 0].mean():.2f} drawn (mean over seeds; claim 60). Under a group baseline each "
           "kept group's expected update is S_N times the plain one (claim 61): dynamic sampling reweighs the "
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
            + ". The exact iteration (claim 64; 3000 steps, tabular class): expected reward / optimum and KL to pi_0 "
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
            "sequence weight has no bias (claim 62) at a variance that grows with K.", "",
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
