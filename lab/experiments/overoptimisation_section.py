"""The over-optimisation section and figure: best-of-n and GRPO against a learned proxy, gold reward against d.

    overoptimisation.png   gold (solid) and proxy (dashed) reward against d = sqrt(KL(pi || pi_0)), mean over
                           seeds: best-of-n per proxy (left), GRPO against the middle proxy per KL weight (right)

Verdict rules (each can fail; seeds share pi_0 and the proxy's data across settings, so comparisons pair them):

    "the proxy keeps rising while the gold reward peaks and falls"  best-of-n, per proxy: the share of seeds whose
        exact gold curve over n has its maximum before the last n and ends more than FALL below it, while the
        proxy never falls; holds when the share's 95% Wilson interval lies above 1/2, does not when below
    "a larger reward model or more pairs moves the gold peak to larger d"  paired t interval of the d of the
        gold peak (best-of-n), larger minus smaller proxy; holds when above 0, does not when below
    "the KL penalty limits over-optimisation"  decided where the penalised objective converges: the share of
        seeds whose exact optimum path pi*_beta has more gold at some beta than at the smallest beta (nearest
        the proxy's argmax) by more than FALL; Wilson, as above
    how far GRPO gets in its budget: gold at its last epoch, each KL weight minus none, paired t (a
        separate question: a run short of its peak shows the penalty's cost, not where it converges)
    "DPO on the proxy's own pairs ends with more gold than GRPO against the proxy": gold at the last epoch, DPO at
        beta minus GRPO at the same KL weight, paired t, per proxy where both were run
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from lab.experiments.intervals import mean_interval, paired_interval, wilson_interval
from lab.experiments.overoptimisation import OVEROPTIMISATION, fit_gao
from lab.files.temporaries import atomic_path

FALL = 0.01
"""A gold curve 'falls' when it ends more than this below its peak (reward units)."""


def peaks_and_falls(curve) -> bool:
    peak = int(np.argmax(curve.gold))
    return peak < len(curve.gold) - 1 and curve.gold[peak] - curve.gold[-1] > FALL and bool(
        np.all(np.diff(curve.proxy) >= -1e-9))


def peak_d(curve) -> float:
    return float(curve.d[int(np.argmax(curve.gold))])


def decide(interval, above: float = 0.0) -> str:
    return "holds" if interval.low > above else "does not hold" if interval.high < above else "inconclusive"


def verdict_rows(results: dict, experiment=OVEROPTIMISATION) -> list[tuple[str, str, str]]:
    rows = []
    for key, result in results.items():
        seeds = list(result["bon"])
        falls = sum(peaks_and_falls(result["bon"][s]) for s in seeds)
        interval = wilson_interval(falls, len(seeds))
        rows.append((f"best-of-n against the {key[0]} proxy on {key[1]} pairs per prompt: the proxy keeps rising "
                     "while the gold reward peaks and falls", f"{falls} of {len(seeds)} seeds, {interval.text(2)} "
                     "(Wilson)", decide(interval, 0.5)))
    keys = list(results)
    for small, large in zip(keys, keys[1:]):
        seeds = list(results[small]["bon"])
        interval = paired_interval([peak_d(results[large]["bon"][s]) for s in seeds],
                                   [peak_d(results[small]["bon"][s]) for s in seeds])
        rows.append((f"the {large[0]} proxy on {large[1]} pairs moves best-of-n's gold peak to larger d than the "
                     f"{small[0]} one on {small[1]}", f"{interval.text()} (paired t)", decide(interval)))
    for key, result in results.items():
        seeds = list(result["optimum"])
        limited = sum(float(np.max(result["optimum"][s].gold[:-1]) - result["optimum"][s].gold[-1]) > FALL
                      for s in seeds)
        interval = wilson_interval(limited, len(seeds))
        rows.append((f"the KL penalty limits over-optimisation of the {key[0]} proxy on {key[1]} pairs: some beta's "
                     f"optimum has more gold than beta = {experiment.betas[-1]}'s", f"{limited} of {len(seeds)} "
                     f"seeds, {interval.text(2)} (Wilson)", decide(interval, 0.5)))
    middle = results[keys[len(keys) // 2]]["rl"]
    none = experiment.kl_weights[0]
    for kl in experiment.kl_weights[1:]:
        seeds = list(middle[kl])
        interval = paired_interval([middle[kl][s].gold[-1] for s in seeds], [middle[none][s].gold[-1] for s in seeds])
        rows.append((f"in {experiment.epochs} epochs, GRPO against the proxy ends with more gold at KL {kl} than at "
                     f"KL {none}", f"{interval.text()} (paired t)", decide(interval)))
    for key, result in results.items():
        for beta, curves in result["dpo"].items():
            if beta not in result["rl"]:
                continue
            seeds = list(curves)
            interval = paired_interval([curves[s].gold[-1] for s in seeds], [result["rl"][beta][s].gold[-1]
                                                                            for s in seeds])
            rows.append((f"DPO at beta {beta} on the {key[0]} proxy's own {key[1]} pairs per prompt ends with more gold "
                         f"than GRPO against that proxy at KL {beta}", f"{interval.text()} (paired t)",
                         decide(interval)))
    return rows


def final_rows(results: dict) -> list[str]:
    """Where each trained path ends: gold, proxy and d at the last epoch, mean over seeds [95% t]."""
    lines = ["| proxy | method | final gold [95% t] | final proxy | final d |", "| --- | --- | --- | --- | --- |"]
    for key, result in results.items():
        paths = [(f"GRPO, KL {kl}", curves) for kl, curves in result["rl"].items()] + [
            (f"DPO on its pairs, beta {beta}", curves) for beta, curves in result["dpo"].items()]
        for name, curves in paths:
            gold, proxy, d = (mean_interval([getattr(c, f)[-1] for c in curves.values()]) for f in ("gold", "proxy", "d"))
            lines.append(f"| {key[0]}, {key[1]} pairs | {name} | {gold.text()} | {proxy.estimate:.3f} | "
                         f"{d.estimate:.2f} |")
    return lines


def fit_rows(results: dict) -> list[str]:
    lines = ["| proxy | path | alpha | beta | d of the fitted peak | RMS residual | straight line's RMS |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for key, result in results.items():
        paths = [("best-of-n", "bon", result["bon"]), ("pi*_beta", "rl", result["optimum"])] + [
            (f"GRPO, KL {kl}", "rl", curves) for kl, curves in result["rl"].items()] + [
            (f"DPO on its pairs, beta {beta}", "rl", curves) for beta, curves in result["dpo"].items()]
        for name, form, curves in paths:
            d = np.concatenate([c.d for c in curves.values()])
            gain = np.concatenate([c.gold - c.gold[0] for c in curves.values()])
            f = fit_gao(d, gain, form)
            reach = float(d.max())
            peak = f"{f['peak_d']:.2f}" if f["peak_d"] <= 2 * reach else f"past the data (> {2 * reach:.1f})"
            lines.append(f"| {key[0]}, {key[1]} pairs | {name} | {f['alpha']:.3f} | {f['beta']:.3f} | "
                         f"{peak} | {f['rms']:.3f} | {f['line_rms']:.3f} |")
    return lines


def plot_overoptimisation(results: dict, path: Path) -> Path:
    fig = Figure(figsize=(10, 3.8))
    left, right = fig.subplots(1, 2)
    for colour, (key, result) in zip(("C0", "C1", "C2", "C3"), results.items()):
        curves = list(result["bon"].values())
        d = np.mean([c.d for c in curves], axis=0)
        left.plot(d, np.mean([c.gold for c in curves], axis=0), color=colour, label=f"gold, {key[0]} {key[1]}")
        left.plot(d, np.mean([c.proxy for c in curves], axis=0), color=colour, ls="--", lw=0.9)
    middle_result = list(results.values())[len(results) // 2]
    optimum = list(middle_result["optimum"].values())
    right.plot(np.mean([c.d for c in optimum], axis=0), np.mean([c.gold for c in optimum], axis=0), "k-", lw=1.2,
               label="gold at pi*_beta")
    right.plot(np.mean([c.d for c in optimum], axis=0), np.mean([c.proxy for c in optimum], axis=0), "k--", lw=0.9)
    for colour, (kl, curves) in zip(("C4", "C5", "C6"), middle_result["rl"].items()):
        d = np.mean([c.d for c in curves.values()], axis=0)
        right.plot(d, np.mean([c.gold for c in curves.values()], axis=0), "-", color=colour, label=f"gold, GRPO KL {kl}")
        right.plot(d, np.mean([c.proxy for c in curves.values()], axis=0), "--", color=colour, lw=0.9)
    for colour, (beta, curves) in zip(("C7", "C8"), middle_result["dpo"].items()):
        d = np.mean([c.d for c in curves.values()], axis=0)
        right.plot(d, np.mean([c.gold for c in curves.values()], axis=0), ":", color=colour, lw=1.6,
                   label=f"gold, DPO on its pairs, beta {beta}")
    for ax, title in ((left, "best-of-n (dashed: proxy)"), (right, "pi*_beta, GRPO against the proxy, DPO on its pairs")):
        ax.set_xlabel("d = sqrt(KL(pi || pi_0))")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    return Path(path)


def kl_gap_lines(results: dict) -> list[str]:
    key, result = next(iter(results.items()))
    lines = ["| n | exact KL(p_n \\|\\| pi_0), seed 0 | log n - (n-1)/n |", "| --- | --- | --- |"]
    lines += [f"| {n} | {exact:.3f} | {bound:.3f} |" for n, exact, bound in result["kl_gap"]]
    return lines


def section_lines(results: dict, seeds: int, experiment=OVEROPTIMISATION) -> list[str]:
    lines = [
        "## Reward-model over-optimisation (Gao, Schulman and Hilton 2023), measured exactly",
        "",
        f"Per seed (0..{seeds - 1}): the lecture's factorised policy at init scale {experiment.init_scale} is pi_0; "
        "a proxy reward model (`lab.training.reward_model`, sizes and pairs below) is fitted on Bradley-Terry pairs "
        f"drawn from pi_0 under the {experiment.reward} reward; best-of-n ranks pi_0's draws by the proxy "
        "(`lab.exact.best_of_n`, exact); GRPO (centered, clipped) trains on the proxy (`--reward learned:PATH`) and "
        "offline DPO on the proxy's own training pairs (`--pairs-from`), each for "
        f"{experiment.epochs} epochs. Gold = the true reward. Every value is an exact sum over all responses "
        "(the trained runs' after every epoch, `gold_reward_exact`, `proxy_reward_exact`, `d`).",
        "",
        "| the claim | 95% interval | verdict |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {claim} | {interval} | **{verdict}** |" for claim, interval, verdict in verdict_rows(results, experiment)]
    lines += ["", f"Where the trained runs end after {experiment.epochs} epochs, mean over seeds [95% t]. DPO reads the "
              "pairs only, never the reward model: proxies fitted on the same pairs (the same seed and number, another "
              "size) share their DPO runs.", "",
              *final_rows(results), "",
              "Gao et al.'s forms fitted over the seeds' points (gain = gold - gold at d = 0):", "",
              *fit_rows(results), "",
              "Best-of-n's KL is not log n - (n-1)/n on this space: the exact KL (`lab.exact.best_of_n`) falls below "
              "it once n draws cover the responses the proxy ranks highest, and stops rising at the proxy's argmax:",
              "", *kl_gap_lines(results), "", "![over-optimisation](overoptimisation.png)", ""]
    return lines
