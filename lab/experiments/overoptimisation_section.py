"""The over-optimisation section and figure: best-of-n and GRPO against a learned proxy, gold reward against d.

    overoptimisation.png   gold (solid) and proxy (dashed) reward against d = sqrt(KL(pi || pi_0)), mean over
                           seeds: best-of-n per proxy (left), GRPO against the middle proxy per KL weight (right)

Verdict rules (lab/experiments/verdicts.py, tested on planted effects; seeds share pi_0 and the proxy's data across
settings, so comparisons pair them; beside each verdict the smallest effect its design detects at 80% power):

    "the proxy keeps rising while the gold reward peaks and falls"  best-of-n, per proxy: the share of seeds whose
        exact gold curve over n has its maximum before the last n and ends more than FALL below it, while the
        proxy never falls: `share_above` 1/2 (Wilson)
    "best-of-n over-optimises": gold at a fixed middle n (`early_index`) minus gold at the largest n, paired by seed,
        `above` with effect of interest EFFECT, from pi_0 and from the peaked pi_0 (init `peaked_init`)
    "the KL penalty limits over-optimisation"  decided where the penalised objective converges: the share of
        seeds whose exact optimum path pi*_beta has more gold at some beta than at the smallest beta (nearest
        the proxy's argmax) by more than FALL; `share_above` 1/2
    "GRPO over-optimises the proxy in its budget": gold at a third of the epochs minus gold at the last, paired,
        `above` EFFECT, per proxy without a penalty
    how far GRPO gets in its budget: gold at its last epoch, each KL weight minus none, `above` EFFECT (a separate
        question: a run short of its peak shows the penalty's cost, not where it converges)
    "DPO on the proxy's own pairs ends with more gold than GRPO against the proxy" (both ascend J_beta with pi_0
        frozen at the same beta): gold at the last epoch, `above` EFFECT, once per set of pairs (proxies fitted on the
        same pairs share their DPO runs)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from lab.experiments import verdicts as v
from lab.experiments.intervals import mean_interval
from lab.experiments.overoptimisation import OVEROPTIMISATION, fit_gao
from lab.files.temporaries import atomic_path

FALL = 0.01
"""A gold curve 'falls' when it ends more than this below its peak (reward units)."""
EFFECT = 0.05
"""The effect of interest of the paired gold comparisons: 1% of the optimum reward 5."""


def peaks_and_falls(curve) -> bool:
    peak = int(np.argmax(curve.gold))
    return peak < len(curve.gold) - 1 and curve.gold[peak] - curve.gold[-1] > FALL and bool(
        np.all(np.diff(curve.proxy) >= -1e-9))


def early_index(points: int) -> int:
    """The fixed checkpoint a path's end is compared with: its middle point (best-of-n) or a third of it (epochs)."""
    return points // 2


def _gold(curves: dict, index: int) -> np.ndarray:
    return np.array([curves[s].gold[index] for s in sorted(curves)])


def verdict_rows(results: dict, experiment=OVEROPTIMISATION) -> list[tuple[str, str, v.Verdict]]:
    """(claim, rule, verdict) per row (module docstring)."""
    rows = []
    for key, result in results.items():
        seeds = list(result["bon"])
        falls = sum(peaks_and_falls(result["bon"][s]) for s in seeds)
        rows.append((f"best-of-n against the {key[0]} proxy on {key[1]} pairs per prompt: the proxy keeps rising "
                     "while the gold reward peaks and falls", f"{falls} of {len(seeds)} seeds (Wilson), above 1/2",
                     v.share_above(falls, len(seeds), share=0.5)))
        for label, path in (("pi_0", "bon"), (f"a peaked pi_0 (init {experiment.peaked_init})", "peaked")):
            curves = result[path]
            i = early_index(len(experiment.best_of))
            rows.append((f"best-of-n from {label} over-optimises the {key[0]} proxy on {key[1]} pairs",
                         f"gold at n = {experiment.best_of[i]} minus gold at n = {experiment.best_of[-1]}, paired by "
                         f"seed, above 0; effect of interest {EFFECT}",
                         v.above(_gold(curves, i), _gold(curves, -1), effect=EFFECT)))
    for key, result in results.items():
        seeds = list(result["optimum"])
        limited = sum(float(np.max(result["optimum"][s].gold[:-1]) - result["optimum"][s].gold[-1]) > FALL
                      for s in seeds)
        rows.append((f"the KL penalty limits over-optimisation of the {key[0]} proxy on {key[1]} pairs: some beta's "
                     f"optimum has more gold than beta = {experiment.betas[-1]}'s", f"{limited} of {len(seeds)} "
                     "seeds (Wilson), above 1/2", v.share_above(limited, len(seeds), share=0.5)))
    none = experiment.kl_weights[0]
    for key, result in results.items():
        curves = result["rl"][none]
        points = len(next(iter(curves.values())).gold)
        i = max(1, (points - 1) // 3)
        rows.append((f"GRPO without a penalty over-optimises the {key[0]} proxy on {key[1]} pairs in "
                     f"{experiment.epochs} epochs", f"gold after epoch {i} minus gold at the last, paired by seed, "
                     f"above 0; effect of interest {EFFECT}", v.above(_gold(curves, i), _gold(curves, -1), effect=EFFECT)))
    keys = list(results)
    middle = results[keys[len(keys) // 2]]["rl"]
    for kl in experiment.kl_weights[1:]:
        rows.append((f"in {experiment.epochs} epochs, GRPO against the {keys[len(keys) // 2][0]} proxy on "
                     f"{keys[len(keys) // 2][1]} pairs ends with more gold at KL {kl} than at KL {none} (k1 in the "
                     "reward, pi_0 frozen)", f"final gold, paired by seed, above 0; effect of interest {EFFECT}",
                     v.above(_gold(middle[kl], -1), _gold(middle[none], -1), effect=EFFECT)))
    seen = set()
    for key, result in results.items():
        if key[1] in seen:  # the same pairs: the same DPO runs, not another confirmation
            continue
        seen.add(key[1])
        for beta, curves in result["dpo"].items():
            if beta not in result["rl"]:
                continue
            rows.append((f"DPO at beta {beta} on the {key[0]} proxy's own {key[1]} pairs per prompt ends with more gold "
                         f"than GRPO against that proxy at KL {beta} (both J_beta, pi_0 frozen)",
                         f"final gold, DPO minus GRPO, paired by seed, above 0; effect of interest {EFFECT}",
                         v.above(_gold(curves, -1), _gold(result["rl"][beta], -1), effect=EFFECT)))
    return rows


def final_rows(results: dict) -> list[str]:
    """Where each trained path ends: gold, proxy and d at the last epoch, mean over seeds [95% t]."""
    lines = ["| proxy | method | final gold [95% t] | final proxy | final d |", "| --- | --- | --- | --- | --- |"]
    for key, result in results.items():
        paths = [(f"GRPO, KL {kl}" + (" (k1 in the reward: ascends J_beta, pi_0 frozen)" if kl else ""), curves)
                 for kl, curves in result["rl"].items()] + [
            (f"DPO on its pairs, beta {beta} (J_beta's pi* under Bradley-Terry pairs, pi_0 frozen)", curves)
            for beta, curves in result["dpo"].items()]
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
        "(`lab.exact.best_of_n`, exact), and again from a peaked pi_0 (init scale "
        f"{experiment.peaked_init}) with its own proxy; GRPO (centered, clipped, k1 in the reward to pi_0 frozen: it "
        "ascends J_beta, as DPO at the same beta) trains on the proxy (`--reward learned:PATH`) and "
        "offline DPO on the proxy's own training pairs (`--pairs-from`), each for "
        f"{experiment.epochs} epochs. Gold = the true reward. Every value is an exact sum over all responses "
        "(the trained runs' after every epoch, `gold_reward_exact`, `proxy_reward_exact`, `d`).",
        "",
        "| the claim | decided by (rule in `lab/experiments/verdicts.py`) | 95% interval | detectable at 80% power "
        "/ needed | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {claim} | {rule} " + v.cells(verdict) for claim, rule, verdict in verdict_rows(results, experiment)]
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
