"""figures/RESULTS.md, written from a reproduction's records: tables, verdicts on the lecture's claims.

Verdict rules (`lab/experiments/verdicts.py`, each tested on planted effects in tests/experiments/test_verdicts.py;
all intervals 95%: a paired t over seeds for differences of means (every setting runs seeds 0..N-1), Wilson for
fractions, a percentile bootstrap for mean shares). Beside each verdict: the smallest effect the design detects
with 80% power (from the observed spread) and the effect the claim needs; a verdict whose design cannot see what
it needs says "underpowered".
- "X is higher than Y":   `above`, effect of interest MARGIN x optimum: holds if the paired interval of X - Y lies
                          above 0, does not hold if it lies below that effect.
- "X makes little difference to Y": `within` +-MARGIN x optimum (equivalence).
- "runs get stuck" (end with a greedy response not optimal on some prompt): `share_above` STUCK_SHARE (Wilson;
                          with 20 runs "does not hold" is out of reach: even 0 stuck runs reach 16%, so a straddling
                          interval reads "underpowered").
- "stuck in local optima" (a stuck ending is a local optimum when no single-token change raises its reward,
                          lab.exact.stuck): `mostly` of the per-run share of stuck endings that are local optima:
                          holds above 1 - STUCK_SHARE, does not hold below STUCK_SHARE, partly between.
- "X does not learn well": `share_below` 1/2 of the fraction of runs optimal on every prompt. When no setting has an
                          optimal run this cannot tell settings apart; RESULTS.md then says so and shows what does
                          (final reward, share of prompts solved).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from lab.experiments.intervals import (Interval, seed_difference, median_quartiles, mean_interval,
                                       probability_interval, wilson_interval)
from lab.experiments.sweep import final_endings
from lab.experiments.sweep import batches, optimal_everywhere
from lab.experiments import verdicts as v

MARGIN = 0.05
"""'little difference': within 5% of the optimum reward."""
STUCK_SHARE = 0.10
"""'gets stuck': more than one run in ten ends away from the optimum."""
TOP_RESPONSES = 3
"""How many of the most common final responses of stuck runs to list per prompt."""


VERDICT_NOTE = ("Beside each verdict: the smallest effect its design detects with 80% power, from the observed spread "
                "(a paired noncentral t; for fractions of runs, every binomial count enumerated; 'out of reach' where "
                "no true value would do), and the effect the claim needs to see. 'underpowered' = the interval "
                "straddles and the design could not have seen that effect: more seeds decide it, not a verdict "
                "against the claim. ")
"""The sentence below the lecture's verdicts (lab/experiments/verdicts.py says how each number is made)."""

LATE_EPOCHS = 10
"""'The last epochs' of a run, for the share of groups that no longer carry a signal."""


def _count(n: int, noun: str) -> str:
    return f"{'one' if n == 1 else n} {noun}{'' if n == 1 else 's'}"


def _by_sign(interval: Interval) -> str:
    """The sign of an interval (the share-of-prompts sentence below the verdicts; not a verdict rule)."""
    return "holds" if interval.low > 0 else "does not hold" if interval.high < 0 else "inconclusive"


def _share_interval(shares) -> Interval:
    """Percentile bootstrap interval of a mean share over runs: inside [0, 1] by construction."""
    return probability_interval(shares)


def _fraction(interval: Interval) -> str:
    return f"{interval.estimate:.0%} [{interval.low:.0%}, {interval.high:.0%}]"


def kl_points(records, experiment, groups):
    """betas, final-reward intervals and final-KL intervals of the KL experiment."""
    betas = [s["kl"] for s in experiment.settings]
    reward = [mean_interval(records.final("mean_reward")[g]) for g in groups]
    kl = [median_quartiles(final_kl(records)[g]) for g in groups]
    return betas, reward, kl


def final_kl(records) -> np.ndarray:
    """float[run]: the exact KL to the reference (`kl_exact`) averaged over the steps of each run's
    last reference period (the last epoch when the reference is frozen at the start, `kl_period` 0:
    then it is the drift from the initial policy). The exact value, not the k3 estimate `kl`: far
    from the reference k3's tail is heavy enough that a mean over a few hundred samples says little."""
    kl = records.step_metrics["kl_exact"]
    return np.array([kl[run, -max(c.kl_period, 1) * c.steps:].mean() for run, c in enumerate(records.configs)])


def _setting_text(experiment, overrides: dict) -> str:
    return ", ".join(f"{n}={overrides.get(n, '')}" for n in experiment.names)


def _objective_text(records, run: int) -> str:
    """What a KL'd run ascends and at which beta' (lab.training.objective), or '-' without a penalty."""
    from lab.training.objective import objective

    ascends = objective(records.configs[run], records.prompts.shape[1])
    return "-" if ascends is None else ascends.line()


def _experiment_table(records, experiment, groups, lecture_runs) -> list[str]:
    final, optimal = records.final(experiment.metric), optimal_everywhere(records)
    kl, with_kl = final_kl(records), "kl" in experiment.names
    lines = [f"| setting | final {experiment.metric.replace('_', ' ')} [95% t] | seed 5, the lecture's draw | "
             "optimal on every prompt [95% Wilson] |" + (" exact KL to the reference, last period: median [quartiles] "
                                                        "over seeds | objective ascended |" if with_kl else ""),
             "| --- | --- | --- | --- |" + (" --- | --- |" if with_kl else "")]
    for overrides, runs, lecture_run in zip(experiment.settings, groups, lecture_runs):
        lines.append(f"| {_setting_text(experiment, overrides)} | {mean_interval(final[runs]).text(3)} | "
                     f"{final[lecture_run]:.3f} | {_fraction(wilson_interval(int(optimal[runs].sum()), len(runs)))} |"
                     + (f" {median_quartiles(kl[runs]).text(4)} | {_objective_text(records, runs[0])} |"
                        if with_kl else ""))
    return lines


def _claims(records, lecture, groups, optimum: float) -> list[str]:
    final, optimal = records.final("mean_reward"), optimal_everywhere(records)
    raw, centered, normalized = groups
    seeds = lambda runs: [records.configs[r].seed for r in runs]  # noqa: E731
    paired = lambda a, b: v.pair(final[a], seeds(a), final[b], seeds(b))  # noqa: E731
    effect = MARGIN * optimum
    everything = [r for g in groups for r in g]
    shares = final_endings(records, centered).local_optimum_share()  # one per stuck centered run
    stuck = lambda runs: v.share_above(int((~optimal[runs]).sum()), len(runs), share=STUCK_SHARE)  # noqa: E731
    rows = [
        ("Raw rewards do not learn sorting well, even on the training prompts.",
         "fraction of raw runs optimal on every prompt below 1/2 (Wilson)",
         v.share_below(int(optimal[raw].sum()), len(raw), share=0.5)),
        ("Centered rewards help (compared with raw).",
         f"final mean reward, centered - raw (paired), above 0; effect of interest {effect:.2f} ({MARGIN:.0%} of "
         "the optimum)", v.above(*paired(centered, raw), effect=effect)),
        ("Centered rewards still get stuck ...",
         f"fraction of centered runs not optimal on every prompt above {STUCK_SHARE:.0%} (Wilson)", stuck(centered)),
        ("... in local optima.", "per centered run, share of its stuck endings (prompts it ends not optimal on) "
         "where no single-token change raises the reward: above "
         f"{1 - STUCK_SHARE:.0%} holds, between {STUCK_SHARE:.0%} and {1 - STUCK_SHARE:.0%} partly (bootstrap, "
         f"{len(shares)} runs)", v.mostly(shares, share=STUCK_SHARE) if len(shares) > 1 else None),
        ("Normalizing by the std makes little difference (compared with centered).",
         f"final mean reward, normalized - centered (paired), within +-{MARGIN:.0%} of the optimum "
         f"(+-{effect:.2f})", v.within(*paired(normalized, centered), margin=effect)),
        ("RL is easy to get stuck.", f"fraction of all runs of the three experiments not optimal on every prompt "
         f"above {STUCK_SHARE:.0%} (Wilson)", stuck(everything)),
    ]
    lines = ["| the lecture says | decided by (rule in `lab/experiments/verdicts.py`) | 95% interval | "
             "detectable at 80% power / needed | verdict |", "| --- | --- | --- | --- | --- |"]
    for claim, rule, verdict in rows:
        if verdict is None:
            lines.append(f"| {claim} | {rule} | fewer than two stuck runs | - | **underpowered** |")
        else:  # fractions and shares in percent, differences of reward in its units
            percent = "fraction" in rule or "share" in rule
            lines.append(f"| {claim} | {rule} " + v.cells(verdict, _fraction(verdict.interval) if percent else None))
    return lines


def _what_the_rules_show(records, lecture, groups) -> list[str]:
    """Below the verdicts: what tells the settings apart, and how many stuck endings are local optima."""
    optimal = optimal_everywhere(records)
    centered = groups[1]
    endings = {i: final_endings(records, runs) for i, runs in enumerate(groups)}
    lines = []
    if not optimal[[r for g in groups for r in g]].any():
        lines += ["No run of any of the three settings ends optimal on every prompt, so the first rule holds for "
                  "all of them and does not single raw rewards out. What tells the settings apart is the final "
                  "mean reward (the second row, and the tables below) and how many prompts a run ends up solving:", ""]
    lines += ["| setting | (run, prompt) pairs solved by the final greedy response | share of prompts solved per "
              "run, mean [95% bootstrap] | stuck endings (pairs not solved) | of which local optima (no single-token change raises the "
              "reward) | of which one token from a higher reward |", "| --- | --- | --- | --- | --- | --- |"]
    for i, overrides in enumerate(lecture.settings):
        e = endings[i]
        lines.append(f"| {_setting_text(lecture, overrides)} | {int((~e.stuck).sum())} of {e.stuck.size} | "
                     f"{_fraction(_share_interval(e.sorted_share))} | {int(e.stuck.sum())} | "
                     f"{int(e.local_optimum.sum())} | {int(e.improvable.sum())} |")
    more = seed_difference(endings[1].sorted_share, endings[0].sorted_share,
                           *([records.configs[r].seed for r in groups[i]] for i in (1, 0)))
    reading = {"holds": "centered runs solve more", "does not hold": "raw runs solve more",
               "inconclusive": "these seeds cannot tell which solves more"}[_by_sign(more)]
    lines += ["", f"Share of prompts solved per run, centered - raw: {more.estimate:.0%} [{more.low:.0%}, "
              f"{more.high:.0%}] (paired t over seeds): {reading}."]
    e = endings[1]
    if not e.stuck.any():
        return lines
    zero = records.epoch_metrics["zero_std_fraction"][centered, -LATE_EPOCHS:].mean()
    lines += ["", f"Of the {int(e.stuck.sum())} stuck endings of centered runs, {int(e.local_optimum.sum())} are "
              f"local optima of the reward and {int(e.improvable.sum())} are one token away from a higher reward. "
              "A run can thus stop one token short of a better response: in the last "
              f"{LATE_EPOCHS} epochs {zero:.0%} of centered groups have equal rewards (last table), and such a group's "
              "centered deltas are all zero, so its samples carry no signal toward the better neighbour."]
    return lines


def _stuck_responses(records, lecture, groups) -> list[str]:
    greedy = records.greedy_responses
    prompts = records.prompts.tolist()
    lines = ["| setting | prompt | runs wrong on it | most common final greedy responses there (runs) |",
             "| --- | --- | --- | --- |"]
    for overrides, runs in zip(lecture.settings, groups):
        for b, prompt in enumerate(prompts):  # sorted(prompt) is the unique optimum on these prompts
            wrong = [r for r in runs if tuple(greedy[r, b].tolist()) != tuple(sorted(prompt))]
            common = Counter(tuple(greedy[r, b].tolist()) for r in wrong).most_common(TOP_RESPONSES)
            text = ", ".join(f"{list(resp)} ({n})" for resp, n in common) or "-"
            lines.append(f"| {_setting_text(lecture, overrides)} | {prompt} | {len(wrong)} of {len(runs)} | {text} |")
    return lines


def results_markdown(reproduction, experiments, exploration: dict | None = None) -> str:
    """The whole RESULTS.md text; every number comes from `reproduction.records` (the exploration
    section's from `exploration`, lab.experiments.exploration_analysis, when given)."""
    records, seeds = reproduction.records, reproduction.seeds
    config = records.configs[0]
    lecture = experiments[0]
    lecture_groups = reproduction.setting_runs(lecture)
    optimum = float(records.optimum[lecture_groups[0]].mean())
    out = ["# Results: the lecture's experiments over seeds",
           "",
           f"Generated by `lab reproduce` (do not edit): {seeds} seeds (0..{seeds - 1}) per setting, "
           f"{records.num_runs} distinct runs trained as {_count(len(batches(records.configs)), 'batched computation')} "
           "(runs that share every shape and schedule setting train together). Settings unless stated: "
           f"{config.epochs} epochs x {config.steps} steps, G = {config.group_size}, Adam lr {config.lr:g}, "
           f"{config.dtype.value} (`--dtype`), the lecture's prompts [[1,0,2],[3,2,4],[1,2,3]]. 'Final' = the last epoch (mean reward of its "
           "samples) or the last step (KL). 'Optimal on every prompt' = the final greedy (argmax) response "
           "reaches the optimum reward on all three prompts. Intervals (`lab/experiments/intervals.py`, "
           "scipy.stats): 95% Student t over seeds for means, a paired t over seeds for differences between "
           "settings (every setting runs the same seeds), Wilson for fractions of runs, and a percentile bootstrap over seeds "
           "(9999 resamples) for means of probabilities and shares, whose ends stay inside [0, 1]. 'Seed 5, the lecture's draw' is one more run per "
           "setting, not among the seeds above: seed 5 drawn as the lecture's script draws (`--sampler "
           "multinomial`); in the lecture's three experiments it is the lecture's own run, whose logged loss "
           "and mean reward it reproduces at every step (`tests/experiments/test_lecture_run.py`).",
           "", "## The lecture's claims against the data", ""]
    out += _claims(records, lecture, lecture_groups, optimum)
    out += ["", VERDICT_NOTE + "Verdict rules: see the docstring of `lab/experiments/results.py` "
            f"(little difference = within {MARGIN:.0%} of the optimum; stuck = greedy response not optimal on "
            f"some prompt at the end; 'gets stuck' holds when the stuck share is above {STUCK_SHARE:.0%} with 95% "
            "confidence; a stuck ending is a local optimum when no single-token change of the response raises its "
            "reward, `lab/exact/stuck.py`). Not decided by these data: that a group whose rewards are all equal gives no update "
            "(exact by construction, `tests/core/test_deltas.py`), and Dr. GRPO's length bias, which cannot arise at "
            "fixed length (claim 16 in `docs/claims.md`); the last section asks it of the autoregressive policy.",
            ""]
    out += _what_the_rules_show(records, lecture, lecture_groups) + [""]
    for experiment in (e for e in experiments if not e.exploration):
        groups = reproduction.setting_runs(experiment)
        out += [f"## {experiment.title}", "", f"![{experiment.name}]({experiment.name}.png)", ""]
        out += _experiment_table(records, experiment, groups, reproduction.setting_lecture_runs(experiment))
        if experiment.name == "temperature":
            from lab.experiments.temperature_section import temperature_lines

            out += ["", *temperature_lines(records, experiment.settings, groups)]
        out.append("")
    out += ["## What the lecture did not show: where runs get stuck", "",
            "Per setting of the lecture's three experiments, the prompts on which runs end with a wrong "
            "greedy response, and the responses they end on:", ""]
    out += _stuck_responses(records, lecture, lecture_groups)
    final_greedy = records.epoch_metrics["greedy_reward"][:, -1]
    out += ["", "Final greedy reward (mean over the three prompts, optimum "
            f"{optimum:g}) per run, lecture experiments:", "",
            "| setting | distribution of final greedy reward (value: runs) |", "| --- | --- |"]
    for overrides, runs in zip(lecture.settings, lecture_groups):
        counts = sorted(Counter(np.round(final_greedy[runs], 3).tolist()).items(), reverse=True)
        out.append(f"| {_setting_text(lecture, overrides)} | "
                   + ", ".join(f"{value:g}: {n}" for value, n in counts) + " |")
    # why runs stay stuck: a group whose rewards are all equal gives zero deltas, so no update at all
    zero = records.epoch_metrics["zero_std_fraction"][:, -LATE_EPOCHS:].mean(axis=1)
    out += ["", f"Why they stay there: the fraction of groups whose rewards are all equal (no GRPO signal, "
            f"`zero_std_fraction`), averaged over the last {LATE_EPOCHS} epochs, mean over seeds [95% bootstrap]:", "",
            "| setting | groups with equal rewards, last epochs |", "| --- | --- |"]
    for overrides, runs in zip(lecture.settings, lecture_groups):
        out.append(f"| {_setting_text(lecture, overrides)} | {_fraction(probability_interval(zero[runs]))} |")
    if exploration is not None:
        from lab.experiments.exploration_results import exploration_markdown

        out += ["", *exploration_markdown(exploration)]
    if reproduction.batch_effect is not None:
        from lab.experiments.controls import batch_effect_lines

        out += ["", *batch_effect_lines(reproduction.batch_effect)]
    if reproduction.length is not None:
        from lab.experiments.length_section import length_section

        out += ["", *length_section(reproduction)]
    if reproduction.critic is not None:
        from lab.experiments.critic_results import critic_markdown

        out += ["", "## The critic GRPO removes: PPO's GAE against the group baseline", "", "![critic](critic.png)",
                "", *critic_markdown(reproduction.critic)]
    return "\n".join(out) + "\n"
