"""The reproduction's exploration section: why the lecture's runs get stuck, and what makes GRPO sort.

    success(s)        = fraction of setting s's seeds whose final greedy response is optimal on every prompt
    pass@k, maj@k     = exact (lab.exact.voting), per prompt, of the initial and the final policy of each seed
    R = -a exp(H) + b   least squares of the epoch's mean reward on exp(its sampling entropy), per setting
                        (Cui et al. 2025); fit quality R^2 = 1 - SS_res / SS_tot over all (seed, epoch) points

Verdict rules (lab/experiments/verdicts.py, tested on planted effects; 95% intervals: Wilson for fractions, a
paired t over seeds for the per-seed differences after - before; beside each verdict the smallest effect its
design detects at 80% power, and "underpowered" where it cannot see what the claim needs):
- "sorts" / "does not sort": `share_above` 1/2 on success;
- "stuck from the start": every setting at the lecture's init scale does not sort, and the initial
  entropy discriminates sorting from stuck seeds (lab.experiments.exploration_checks: AUC over every
  centered, clipped seed of all scales); the old rule, P(a group of G contains the optimum) < 1/2,
  holds at init 0.1 too, where every seed sorts, so it cannot tell stuck from exploring;
- "rescues": some entropy coefficient sorts (holds); every coefficient does not sort (does not hold);
  underpowered where a coefficient's share rule is;
- "training raises X": `above` on X(after) - X(before), paired by seed, effect of interest RAISE;
- "the toy shows the trade-off": per seed median R^2 >= FIT_QUALITY, a > 0, and exp(H) beats a straight
  line in H in most seeds (exploration_checks.fit_rows); a high R^2 alone does not test the exp(H) form.
Nothing here prints; figures are drawn by lab.experiments.figures.plot_exploration_*.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lab.exact.enumeration import all_probs, reward_table
from lab.experiments import verdicts as v
from lab.experiments import exploration_checks as checks
from lab.experiments.intervals import Interval, mean_interval, probability_interval, wilson_interval
from lab.policies.factorized import Policy
from lab.policies import policy_from_state
from lab.experiments.sweep import optimal_everywhere
from lab.exact.voting import maj_at_k_from_probs, pass_at_k_from_probs

INIT_SCALES = (1.0, 0.5, 0.3, 0.1)
"""Embedding init scales of the exploration experiment (1 = the lecture)."""
ENTROPY_COEFS = (0.01, 0.03, 0.1, 0.3)
"""Entropy-bonus weights tried at the lecture's initialisation (centered deltas, clipped loss)."""
KS = tuple(range(1, 65))
"""k of pass@k and maj@k."""
STUCK, EXPLORING = {"init_scale": 1.0, "delta": "centered", "loss": "clipped"}, \
    {"init_scale": 0.1, "delta": "centered", "loss": "clipped"}
"""The two settings whose pass@k and maj@k are compared before and after training."""
FIGURES = ("exploration_init.png", "exploration_bonus.png", "exploration_pass_at_k.png",
           "exploration_entropy_reward.png")
"""The section's figures, in the order lab.experiments.exploration_figures writes them."""
FIT_QUALITY = 0.9
"""R^2 from which the entropy-reward fit counts as showing the trade-off."""


@dataclass(frozen=True)
class Fit:
    """R = -a exp(H) + b on a setting's (entropy, reward) points, with R^2."""

    a: float
    b: float
    r2: float
    entropy: np.ndarray
    reward: np.ndarray


RAISE = 0.05
"""'Training raises pass@k / maj@k': the effect of interest, 5 percentage points."""


def sorts(records, runs) -> v.Verdict:
    """"Setting sorts": success (optimal on every prompt) in more than half the seeds, Wilson."""
    return v.share_above(int(optimal_everywhere(records)[runs].sum()), len(runs), share=0.5)


def either(verdicts: list, holds: bool, fails: bool) -> v.Verdict:
    """A composite answer (holds / does not hold as the caller decides from the parts), else underpowered where a
    part is, else inconclusive; the design's reach is the parts' widest."""
    worst = max(verdicts, key=lambda x: x.detectable)
    answer = (v.HOLDS if holds else v.FAILS if fails else
              v.UNDERPOWERED if any(x.answer == v.UNDERPOWERED for x in verdicts) else v.INCONCLUSIVE)
    return v.Verdict(answer, worst.interval, worst.detectable, worst.needed)


def success(records, runs) -> Interval:
    return wilson_interval(int(optimal_everywhere(records)[runs].sum()), len(runs))


def sampling_entropy(records) -> np.ndarray:
    """float[run epoch]: the mean per-position entropy of each epoch's sampling policy (its first step)."""
    steps = records.configs[0].steps
    return records.step_metrics["entropy"][:, ::steps]


def entropy_reward_fit(records, runs) -> Fit:
    """Least squares of mean_reward on exp(entropy) over every (seed, epoch) of `runs`."""
    h = sampling_entropy(records)[runs].ravel().astype(float)
    r = records.epoch_metrics["mean_reward"][runs].ravel().astype(float)
    design = np.stack([-np.exp(h), np.ones_like(h)], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, r, rcond=None)
    residual = r - design @ np.array([a, b])
    total = ((r - r.mean()) ** 2).sum()
    return Fit(float(a), float(b), float(1 - (residual**2).sum() / total) if total > 0 else float("nan"), h, r)


def initial_policy(config, vocab_size: int, length: int) -> Policy:
    """The policy a run started from (its seed's generator, its init scale)."""
    return Policy(vocab_size, length, length, config.dim, generator=torch.Generator().manual_seed(config.seed),
                  init_scale=config.init_scale)


def at_k_curves(records, runs, prompts: torch.Tensor, reward: str, ks=KS) -> dict[str, np.ndarray]:
    """pass@k and maj@k for k = 1..len(ks), mean over prompts, before and after training: name -> float[seed k]."""
    vocab = int(records.state["embedding"].shape[-2])
    length = prompts.shape[1]
    table = reward_table(prompts, reward, vocab, length).double()
    policies = {"before": [initial_policy(records.configs[r], vocab, length) for r in runs],
                "after": [policy_from_state(records.state, r) for r in runs]}
    # before and after in one call of each: float[when seed batch n]
    probs = torch.stack([torch.stack([all_probs(p, prompts, torch.float64).detach() for p in group])
                         for group in policies.values()])
    passes, majs = pass_at_k_from_probs(probs, table, ks).mean(2), maj_at_k_from_probs(probs, table, ks).mean(2)
    curves = {}
    for i, when in enumerate(policies):
        curves[f"pass_{when}"], curves[f"maj_{when}"] = passes[i].numpy(), majs[i].numpy()
    return curves


def initial_group_hit(records, runs, prompts: torch.Tensor, reward: str) -> np.ndarray:
    """float[seed]: P(a group of G contains an optimal response) at initialisation, mean over prompts."""
    vocab, length = int(records.state["embedding"].shape[-2]), prompts.shape[1]
    table = reward_table(prompts, reward, vocab, length).double()
    probs = torch.stack([all_probs(initial_policy(records.configs[r], vocab, length), prompts,
                                   torch.float64).detach() for r in runs])
    return pass_at_k_from_probs(probs, table, [records.configs[runs[0]].group_size])[..., 0].mean(1).numpy()


def _row(claim: str, rule: str, numbers: str, verdict) -> str:
    """A verdict row; `verdict` a `lab.experiments.verdicts.Verdict` (its reach shown) or an answer alone."""
    if isinstance(verdict, str):
        return f"| {claim} | {rule} | {numbers} | - | **{verdict}** |"
    return f"| {claim} | {rule} " + v.cells(verdict, numbers)


def _fraction(interval: Interval) -> str:
    return f"{interval.estimate:.0%} [{interval.low:.0%}, {interval.high:.0%}]"


def exploration_markdown(analysis: dict) -> list[str]:
    """RESULTS.md's exploration section from `analysis` (lab.experiments.reproduce.explore)."""
    records, seeds = analysis["records"], analysis["seeds"]
    grid, bonus = analysis["grid"], analysis["bonus"]
    lecture_settings = [s for s in grid if s["init_scale"] == 1.0]
    stuck_everywhere = [success(records, analysis["runs"][_key(s)]) for s in lecture_settings]
    discrimination, areas = checks.discrimination_rows(analysis, lambda r, runs: optimal_everywhere(r)[runs])
    entropy_auc = areas.get("initial entropy", (float("nan"), 1.0))
    initial_h = sampling_entropy(records)[:, 0]
    medians = {scale: float(np.median(initial_h[analysis["runs"][_key({**EXPLORING, "init_scale": scale})]]))
               for scale in INIT_SCALES}
    stuck_parts = [sorts(records, analysis["runs"][_key(s)]) for s in lecture_settings]
    stuck_verdict = either(stuck_parts, all(x.interval.high < 0.5 for x in stuck_parts)
                           and checks.discriminates(*entropy_auc), any(x.answer == v.HOLDS for x in stuck_parts))
    exploring = success(records, analysis["runs"][_key(EXPLORING)])
    stuck = success(records, analysis["runs"][_key(STUCK)])
    bonus_success = [success(records, analysis["runs"][_key(s)]) for s in bonus]
    bonus_parts = [sorts(records, analysis["runs"][_key(s)]) for s in bonus]
    rescue = either(bonus_parts, any(x.answer == v.HOLDS for x in bonus_parts),
                    all(x.answer == v.FAILS for x in bonus_parts))
    best = max(range(len(bonus)), key=lambda i: bonus_success[i].estimate)
    out = ["## Exploration: why the lecture's runs get stuck, and what makes GRPO sort", "",
           f"{seeds} seeds per setting, trained in the same batch as the experiments above. `init_scale` multiplies "
           "the lecture's embedding initialisation (E ~ N(0, 1), as `nn.Embedding`): logits are quadratic in E, so "
           "init scale s multiplies the initial logits by s^2: it is the lecture's initial policy at temperature "
           "1/s^2 (0.1: temperature 100, almost uniform). `entropy_coef` adds an entropy bonus (loss - coef x exact mean "
           "entropy). Success = final greedy response optimal on every prompt. Rules: the docstring of "
           "`lab/experiments/exploration_results.py`.", "",
           "| claim | decided by | 95% interval | detectable at 80% power / needed | verdict |",
           "| --- | --- | --- | --- | --- |",
           _row("The lecture's runs are stuck from the start: their initial policy explores too little.",
                "at init scale 1 every delta x loss setting sorts in fewer than half the seeds (Wilson), and the "
                "initial entropy tells sorting seeds from stuck ones (next row)",
                f"best setting {_fraction(max(stuck_everywhere, key=lambda i: i.estimate))}; initial entropy AUC "
                f"{entropy_auc[0]:.2f}; median initial entropy " + ", ".join(
                    f"{medians[scale]:.3f} (scale {scale:g})" for scale in INIT_SCALES), stuck_verdict),
           *discrimination,
           _row("An exploring initialisation (init scale 0.1) makes centered GRPO (clipped loss) sort.",
                "success above 1/2 (Wilson)", _fraction(exploring), sorts(records, analysis["runs"][_key(EXPLORING)])),
           _row("At the lecture's initialisation centered GRPO (clipped loss) sorts.",
                "success above 1/2 (Wilson)", _fraction(stuck), sorts(records, analysis["runs"][_key(STUCK)])),
           _row("An entropy bonus at the lecture's initialisation rescues the stuck runs "
                "(centered, clipped).", "some coefficient's success above 1/2 (all below: does not hold)",
                f"best coef {bonus[best]['entropy_coef']:g}: {_fraction(bonus_success[best])}", rescue)]
    top = analysis["ks"][-1]
    for name, setting in (("stuck (init scale 1)", STUCK), ("exploring (init scale 0.1)", EXPLORING)):
        curves = analysis["at_k"][_key(setting)]
        for label, key, k in (("pass@1", "pass", 1), (f"pass@{top}", "pass", top), (f"maj@{top}", "maj", top)):
            verdict = v.above(curves[f"{key}_after"][:, k - 1], curves[f"{key}_before"][:, k - 1], effect=RAISE)
            out.append(_row(f"Training raises {label}, {name}, centered clipped.", "after - before, paired by seed "
                            f"(t), above 0; effect of interest {RAISE}", verdict.interval.text(4), verdict))
    out += checks.fit_rows(analysis, lambda key: _label(dict(key)))
    out += checks.loss_share_rows(analysis)
    out += checks.lr_rows(analysis)
    out += _exploration_tables(analysis)
    out += ["", "![exploration_entropy_reward](exploration_entropy_reward.png)", ""]
    return out


def _exploration_tables(analysis: dict) -> list[str]:
    """The exploration section's tables: per setting, per entropy coefficient, pass@k and maj@k."""
    records, grid, bonus, top = analysis["records"], analysis["grid"], analysis["bonus"], analysis["ks"][-1]
    out = []
    out += ["", "![exploration_init](exploration_init.png)", "",
            "| init scale | delta | loss | initial entropy (nats, ln 5 = 1.609): mean [95% t]; median | "
            "initial optimal_prob: mean [95% bootstrap]; median | success [95% Wilson] | final mean reward [95% t] |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    entropy, optimal = sampling_entropy(records), records.epoch_metrics["optimal_prob"]
    final = records.final("mean_reward")
    for s in grid:
        runs = analysis["runs"][_key(s)]
        out.append(f"| {s['init_scale']:g} | {s['delta']} | {s['loss']} | {mean_interval(entropy[runs, 0]).text(3)}; "
                   f"{np.median(entropy[runs, 0]):.3f} | {probability_interval(optimal[runs, 0]).text(4)}; "
                   f"{np.median(optimal[runs, 0]):.2g} | {_fraction(success(records, runs))} | "
                   f"{mean_interval(final[runs]).text(3)} |")
    out += ["", "![exploration_bonus](exploration_bonus.png)", "",
            "| entropy coef (init scale 1, centered, clipped) | final entropy [95% t] | success [95% Wilson] | "
            "final mean reward [95% t] |", "| --- | --- | --- | --- |"]
    for s in [STUCK, *bonus]:
        runs = analysis["runs"][_key(s)]
        out.append(f"| {s.get('entropy_coef', 0.0):g} | {mean_interval(entropy[runs, -1]).text(3)} | "
                   f"{_fraction(success(records, runs))} | {mean_interval(final[runs]).text(3)} |")
    out += ["", "![exploration_pass_at_k](exploration_pass_at_k.png)", "",
            "pass@k and maj@k (exact, mean over the three prompts, mean over seeds [95% percentile bootstrap over "
            "seeds]; maj@k: the plurality answer of k samples, a tie broken uniformly at random among the tied "
            "responses):", "",
            "| setting | k | pass@k before | pass@k after | maj@k before | maj@k after |",
            "| --- | --- | --- | --- | --- | --- |"]
    for name, setting in (("stuck", STUCK), ("exploring", EXPLORING)):
        curves = analysis["at_k"][_key(setting)]
        for k in sorted({k for k in (1, 4, 16, 64) if k <= top} | {top}):
            cells = [probability_interval(curves[c][:, k - 1]).text(4)
                     for c in ("pass_before", "pass_after", "maj_before", "maj_after")]
            out.append(f"| {name} ({_label(setting)}) | {k} | " + " | ".join(cells) + " |")
    out += ["", *_at_k_sentences(analysis), "", *checks.crossing_lines(analysis, lambda key: _label(dict(key)))]
    return out


def _key(setting: dict) -> tuple:
    return tuple(sorted(setting.items()))


def _label(setting: dict) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in setting.items())


def _at_k_sentences(analysis: dict) -> list[str]:
    """What the pass@k / maj@k curves show, from the numbers (DeepSeekMath: RL raises maj@K, not pass@K;
    Yue et al. 2025: the base model's pass@k wins at large k)."""
    ks, lines = analysis["ks"], []
    for name, setting in (("stuck", STUCK), ("exploring", EXPLORING)):
        c = analysis["at_k"][_key(setting)]
        before, after = c["pass_before"].mean(0), c["pass_after"].mean(0)
        wins = [k for k, b, a in zip(ks, before, after) if b > a]
        sharpen = probability_interval(c["maj_after"][:, -1] - c["maj_before"][:, -1])
        widen = probability_interval(c["pass_after"][:, -1] - c["pass_before"][:, -1])
        lines.append(
            f"- {name} ({_label(setting)}): "
            + (f"the initial policy's mean pass@k is higher from k = {wins[0]} on (k up to {ks[-1]})"
               if wins else f"the trained policy's mean pass@k is higher at every k from 1 to {ks[-1]}")
            + f"; at k = {ks[-1]} training changes maj@k by {sharpen.text(3)} and pass@k by {widen.text(3)} "
            "(after - before, paired by seed, 95% percentile bootstrap).")
    return ["What this shows (mean over seeds; DeepSeekMath reports RL raising maj@K but not pass@K):", "", *lines]
