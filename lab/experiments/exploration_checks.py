"""What the exploration data can and cannot say: the referee's checks of lab.experiments.exploration_results.

    discriminates(Q)   AUC of an initial quantity Q for success over every seed of the centered, clipped settings of
                       all init scales = P(Q(sorting seed) > Q(non-sorting seed)) (Mann-Whitney U / (n1 n0)), with
                       the two-sided Mann-Whitney p-value (scipy.stats.mannwhitneyu); Q discriminates when
                       AUC >= DISCRIMINATION (or <= 1 - DISCRIMINATION) and p < 0.05
    pass@k(p)          = 1 - (1 - p)^k per (seed, prompt), p = P(one sample is optimal); increasing in p for every
                       k >= 1, so training lowers pass@k at every k exactly where it lowers p
    crossing k         the smallest k of CROSSING_KS at which the mean over seeds and prompts of pass@k before
                       training exceeds that after (Yue et al. 2025's pattern), or none up to the largest
    fits               per seed and on the seed-mean curve (mean over seeds of each epoch's entropy and reward):
                       R = -a exp(H) + b and R = c H + d by least squares, each with its R^2
    loss share         at init 0.1, clipped minus naive paired by seed: the sampling entropy after EARLY_EPOCH
                       epochs and the success

Pure numpy/scipy on records and exact probabilities; nothing prints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats

from lab.exact.enumeration import all_probs, reward_table
from lab.exact.voting import pass_at_k_from_probs
from lab.policies import policy_from_state

DISCRIMINATION = 0.8
"""AUC from which an initial quantity counts as telling sorting seeds from stuck ones."""
CROSSING_KS = tuple(int(k) for k in np.unique(np.round(np.logspace(0, 5, 401))))
"""k of the crossing search: 1 to 100000, log-spaced."""
EARLY_EPOCH = 10
"""The epoch at which the loss's effect on the sampling entropy is read."""
SUCCESS_EFFECT = 0.25
"""The loss-share row's effect of interest on success: a quarter of the seeds."""
ENTROPY_EFFECT = 0.05
"""... and on the sampling entropy at EARLY_EPOCH, in nats."""


def auc_reach(n1: int, n0: int, power: float = 0.8) -> float:
    """The smallest |AUC - 1/2| the two-sided Mann-Whitney test at 5% finds with probability `power`, by the normal
    approximation of U under the null, se = sqrt((n1 + n0 + 1) / (12 n1 n0)) (inf without both classes)."""
    if min(n1, n0) == 0:
        return float("inf")
    return float((stats.norm.ppf(0.975) + stats.norm.ppf(power)) * np.sqrt((n1 + n0 + 1) / (12 * n1 * n0)))


def auc(values: np.ndarray, success: np.ndarray) -> tuple[float, float]:
    """(AUC, two-sided Mann-Whitney p) of `values` for the boolean `success`; (nan, nan) without both classes."""
    good, bad = values[success], values[~success]
    if len(good) == 0 or len(bad) == 0:
        return float("nan"), float("nan")
    test = stats.mannwhitneyu(good, bad, alternative="two-sided")
    return float(test.statistic / (len(good) * len(bad))), float(test.pvalue)


def discriminates(area: float, p: float) -> bool:
    return p < 0.05 and (area >= DISCRIMINATION or area <= 1 - DISCRIMINATION)


def optimal_probs(records, runs, prompts: torch.Tensor, reward: str, initial) -> tuple[np.ndarray, np.ndarray]:
    """P(one sample is optimal) per (seed, prompt) before and after training: float[seed prompt] x2.
    `initial(config, vocab, length)` builds a run's initial policy."""
    vocab, length = int(records.state["embedding"].shape[-2]), prompts.shape[1]
    table = reward_table(prompts, reward, vocab, length).double()
    out = []
    for build in (lambda r: initial(records.configs[r], vocab, length), lambda r: policy_from_state(records.state, r)):
        probs = torch.stack([all_probs(build(r), prompts, torch.float64).detach() for r in runs])
        out.append(pass_at_k_from_probs(probs, table, [1])[..., 0].numpy())
    return out[0], out[1]


def pass_at_k(p: np.ndarray, ks=CROSSING_KS) -> np.ndarray:
    """1 - (1 - p)^k: float[...] -> float[... len(ks)] (log1p, so k = 100000 with p = 1e-6 stays exact)."""
    ks = np.asarray(ks, dtype=float)
    return -np.expm1(ks * np.log1p(-np.clip(p, 0.0, 1.0))[..., None])


def crossing(before: np.ndarray, after: np.ndarray, ks=CROSSING_KS) -> int | None:
    """The smallest k at which mean pass@k before training exceeds mean pass@k after, else None."""
    wins = pass_at_k(before, ks).mean(axis=(0, 1)) > pass_at_k(after, ks).mean(axis=(0, 1))
    return int(np.asarray(ks)[wins.argmax()]) if wins.any() else None


@dataclass(frozen=True)
class FitQuality:
    """R^2 of R = -a exp(H) + b and of R = c H + d, per seed and on the seed-mean curve."""

    exp_per_seed: np.ndarray
    linear_per_seed: np.ndarray
    exp_mean_curve: float
    linear_mean_curve: float
    a_mean_curve: float

    def exp_wins(self) -> tuple[int, float]:
        """Seeds where exp(H) fits better, and the two-sided sign-test p-value (scipy.stats.binomtest)."""
        wins = int((self.exp_per_seed > self.linear_per_seed).sum())
        return wins, float(stats.binomtest(wins, len(self.exp_per_seed)).pvalue)


def _r2(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(R^2, slope) of the least-squares line y = s x + t."""
    design = np.stack([x, np.ones_like(x)], axis=1)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    total = ((y - y.mean()) ** 2).sum()
    return (float(1 - ((y - design @ coef) ** 2).sum() / total) if total > 0 else float("nan")), float(coef[0])


def fit_quality(entropy: np.ndarray, reward: np.ndarray) -> FitQuality:
    """entropy, reward float[seed epoch] -> the fits of the module docstring."""
    per_seed = np.array([[_r2(np.exp(h), r)[0], _r2(h, r)[0]] for h, r in zip(entropy, reward)])
    h, r = entropy.mean(0), reward.mean(0)
    exp_fit, slope = _r2(np.exp(h), r)
    return FitQuality(per_seed[:, 0], per_seed[:, 1], exp_fit, _r2(h, r)[0], -slope)


def _row(claim: str, rule: str, numbers: str, verdict, reach: str = "-") -> str:
    """A verdict row: `verdict` a `lab.experiments.verdicts.Verdict` (its reach shown), or an answer with `reach`
    saying what the design can see (a rank test or a fit has no detectable shift of a mean)."""
    if isinstance(verdict, str):
        return f"| {claim} | {rule} | {numbers} | {reach} | **{verdict}** |"
    from lab.experiments.verdicts import cells

    return f"| {claim} | {rule} " + cells(verdict, numbers)


def _pct(interval) -> str:
    return f"{interval.estimate:.0%} [{interval.low:.0%}, {interval.high:.0%}]"


def discrimination_rows(analysis: dict, success_of) -> tuple[list[str], dict]:
    """Rows: which initial quantity tells sorting seeds from stuck ones (AUC over all centered, clipped runs)."""
    records, runs = analysis["records"], analysis["centered_clipped"]
    quantities = analysis["initial_quantities"]  # name -> float[run] over `runs`
    solved = success_of(records, runs)
    areas = {name: auc(values, solved) for name, values in quantities.items()}
    chosen = [name for name, (a, p) in areas.items() if discriminates(a, p)]
    text = ("; ".join(f"{name}: AUC {a:.2f} (p {p:.1g})" for name, (a, p) in areas.items())
            + f"; discriminating: {', '.join(chosen) or 'none'}")
    classes = int(solved.sum()), int((~np.asarray(solved, dtype=bool)).sum())
    reach = auc_reach(*classes)
    blind = min(classes) == 0 or reach > DISCRIMINATION - 0.5
    rows = [_row("An initial quantity tells the seeds that will sort from those that will not (centered, clipped, "
                 "every init scale).", f"AUC = P(Q of a sorting seed > Q of a stuck one) >= {DISCRIMINATION} "
                 "(or <= 1 - that) with Mann-Whitney p < 0.05, over all seeds of the four scales", text,
                 "holds" if chosen else "underpowered" if blind else "does not hold",
                 f"{reach:.3g} / {DISCRIMINATION - 0.5:.3g} (AUC - 1/2; {classes[0]} sorting, {classes[1]} stuck seeds)")]
    return rows, areas


def crossing_lines(analysis: dict, label) -> list[str]:
    """pass@k to the k where the mean curves cross, and the per-(seed, prompt) picture."""
    lines = []
    for name, key in analysis["at_k_settings"]:
        before, after = analysis["p_opt"][key]
        k = crossing(before, after)
        lower = int((after < before).sum())
        solved = int(analysis["solved"][key].sum())
        pairs = before.size
        top = CROSSING_KS[-1]
        lines.append(
            f"- {name} ({label(key)}): "
            + (f"the initial policy's mean pass@k exceeds the trained one's from k = {k} on (Yue et al.'s crossing)"
               if k else f"the trained policy's mean pass@k is higher at every k up to {top} (no crossing)")
            + f". Per (seed, prompt) pass@k = 1 - (1 - p)^k rises with p at every k, so training lowers pass@k at "
            f"every k in the {lower} of {pairs} pairs whose P(optimal) fell, and raises it at every k in the others; "
            f"{solved} of {pairs} pairs end with a sorted greedy response.")
    return lines


def fit_rows(analysis: dict, label) -> list[str]:
    """Cui et al.'s R = -a exp(H) + b judged per seed and on the mean curve, against a straight line in H."""
    rows = []
    for key, fit in analysis["fit_quality"].items():
        wins, p = fit.exp_wins()
        median_exp, median_line = float(np.median(fit.exp_per_seed)), float(np.median(fit.linear_per_seed))
        verdict = ("holds" if median_exp >= 0.9 and fit.a_mean_curve > 0 and wins > len(fit.exp_per_seed) / 2
                   and p < 0.05 else "inconclusive" if median_exp >= 0.9 else "does not hold")
        rows.append(_row(
            f"The toy shows Cui et al.'s R = -a exp(H) + b, and not just any decreasing relation ({label(key)}).",
            "per seed median R^2 >= 0.9, a > 0 on the seed-mean curve, and exp(H) fits better than a line "
            "R = c H + d in more seeds than not (sign test p < 0.05)",
            f"per seed median R^2 {median_exp:.2f} (line {median_line:.2f}); seed-mean curve {fit.exp_mean_curve:.2f} "
            f"(line {fit.linear_mean_curve:.2f}), a = {fit.a_mean_curve:.3f}; exp(H) better in {wins} of "
            f"{len(fit.exp_per_seed)} seeds (p {p:.2g})", verdict, f"sign test on {len(fit.exp_per_seed)} seeds"))
    return rows


def loss_share_rows(analysis: dict) -> list[str]:
    """At init 0.1: naive against clipped, paired by seed (success and the sampling entropy at EARLY_EPOCH)."""
    from lab.experiments import verdicts as v
    from lab.experiments.intervals import wilson_interval

    share = analysis["loss_share"]
    naive, clipped = share["naive_success"], share["clipped_success"]
    entropy = v.above(share["clipped_entropy"], share["naive_entropy"], effect=ENTROPY_EFFECT)
    wn, wc = wilson_interval(int(naive.sum()), len(naive)), wilson_interval(int(clipped.sum()), len(clipped))
    # the same seeds under both losses: the success difference is paired by seed too (0, +1 or -1 per seed)
    success = v.above(np.asarray(clipped, dtype=float), np.asarray(naive, dtype=float), effect=SUCCESS_EFFECT)
    parts = (success, entropy)
    worst = max(parts, key=lambda x: x.detectable)
    answer = (v.HOLDS if all(x.answer == v.HOLDS for x in parts) else v.FAILS if any(x.answer == v.FAILS for x in parts)
              else v.UNDERPOWERED if any(x.answer == v.UNDERPOWERED for x in parts) else v.INCONCLUSIVE)
    verdict = v.Verdict(answer, success.interval, worst.detectable, worst.needed)
    return [_row("At init scale 0.1 the loss matters as much as the start: the clipped loss keeps the policy "
                 "exploring for longer than the naive one (centered deltas).",
                 f"success (optimal on every prompt, 0 or 1 per seed), clipped - naive, and the sampling entropy "
                 f"at epoch {EARLY_EPOCH}, clipped - naive, both paired t over seeds, above 0 (effects of interest "
                 f"{SUCCESS_EFFECT} of the seeds, {ENTROPY_EFFECT} nats)",
                 f"success naive {_pct(wn)}, clipped {_pct(wc)}, difference {success.interval.text(2)}; entropy at "
                 f"epoch {EARLY_EPOCH}: {entropy.interval.text(3)}", verdict)]


def lr_rows(analysis: dict) -> list[str]:
    """The learning-rate control (lab.experiments.controls): success at other learning rates and epochs."""
    rows = []
    for (scale, lr, epochs), interval in analysis.get("lr_control", {}).items():
        from lab.experiments.verdicts import share_above

        verdict = share_above(round(interval.estimate * interval.n), interval.n, share=0.5)
        rows.append(_row(f"Learning-rate control: centered GRPO (clipped loss) sorts at init scale {scale:g} with "
                         f"lr {lr:g} for {epochs} epochs.", "success above 1/2 (Wilson)", _pct(interval), verdict))
    return rows
