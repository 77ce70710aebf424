"""RESULTS.md's "Before RL" section: SFT, expert iteration and GRPO on the same task, RL from an SFT start, clipping.

    stage 1   SFT on noisy demonstrations, seeds 0..N-1; seed 0's final policy is the SFT start
    stage 2   SFT (optimal, noisy), expert iteration (reward >= THRESHOLD), GRPO (centered, clipped), GRPO + KL and
              DPO from the random start and from the SFT start (the start is the reference), the lecture's GRPO
              with and without --max-grad-norm 1.0, and a setting that diverges without clipping, with and without
    measured  after the last epoch: the exact expected reward and KL to the run's initial policy (sums over the 125
              responses of each prompt), greedy accuracy, success (the greedy response optimal on every prompt),
              samples drawn from the policy to train on, optimizer steps

Every setting runs the same seeds, so comparisons are paired by seed (`seed_difference`: Student t over the
per-seed differences); a single setting's success is a fraction of seeds (Wilson). Verdict rules, each able to
fail (95% intervals, lab.experiments.intervals):
- "RL beats imitation of noisy demonstrations": GRPO minus SFT (noisy), final exact E[r], per seed. Holds if the
  interval lies above 0, does not hold if below, else inconclusive.
- "expert iteration reaches GRPO's reward at equal samples" (both draw G per prompt each epoch): expert iteration
  minus GRPO, final exact E[r]. Holds if the interval's low end is above -REACH, does not hold if its high end is
  below -REACH, else inconclusive.
- "an SFT start makes GRPO and DPO sort, where a random start does not": per method, success (1 or 0 per seed)
  from the SFT start minus from the random start, paired by seed. Holds if its interval lies above 0 and the random
  start's success (Wilson) lies below 1/2; does not hold if the difference's estimate is not above 0 or the random
  start's success lies at or above 1/2; else inconclusive.
- "an SFT reference is better than the raw one" (the lab's reference is the run's start, so start and reference
  change together): from SFT minus from random, final exact E[r], per method. Holds if both intervals lie above 0,
  does not hold if either lies below, else inconclusive.
- "clipping the gradient at 1.0 keeps a diverging setting finite": diverged (1 or 0 per seed) with clipping minus
  without, paired by seed. Holds if the interval lies below 0; does not hold if its estimate is not below 0; else
  inconclusive.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from lab.experiments.exploration_results import success
from lab.experiments.intervals import Interval, mean_interval, seed_difference, wilson_interval
from lab.experiments.sweep import optimal_everywhere
from lab.training.config import TrainConfig

NOISE = 0.3
"""The noisy demonstrations' token replacement rate."""
THRESHOLD = 4.0
"""Expert iteration keeps the samples with reward >= this (the optimum is 5)."""
BETA = 0.05
"""The KL weight of GRPO + KL and DPO's beta."""
REACH = 0.25
"""Expert iteration reaches GRPO's reward if it is at most this much below it (5% of the optimum)."""
CLIP = 1.0
"""--max-grad-norm of the clipped settings (TRL's and verl's default)."""
DIVERGING = dict(lr=1.0, kl=1.0, kl_period=0)
"""A setting that diverges without clipping: a large step with a strong penalty to a frozen reference (its k3
overflows); clipping acts on the gradient, so whether it helps is what the verdict decides."""

GRPO = dict(delta="centered", loss="clipped", optimum_metrics=True)
SFT_NOISY = dict(loss="sft", demos="noisy", demo_noise=NOISE)
SETTINGS = (
    ("SFT, optimal demonstrations", dict(loss="sft")),
    ("SFT, noisy demonstrations", SFT_NOISY),
    ("expert iteration", dict(loss="expert-iteration", ei_filter="threshold", reward_threshold=THRESHOLD)),
    ("GRPO", GRPO),
    ("GRPO + KL, random start", dict(GRPO, kl=BETA, kl_period=0)),
    ("DPO, random start", dict(loss="dpo", kl=BETA, optimum_metrics=True)),
    ("GRPO + KL, SFT start", dict(GRPO, kl=BETA, kl_period=0, start=True)),
    ("DPO, SFT start", dict(loss="dpo", kl=BETA, optimum_metrics=True, start=True)),
    ("GRPO, clipped at 1.0", dict(GRPO, max_grad_norm=CLIP)),
    ("diverging setting", dict(GRPO, **DIVERGING)),
    ("diverging setting, clipped at 1.0", dict(GRPO, **DIVERGING, max_grad_norm=CLIP)),
)
"""(label, overrides of the lecture's settings); `start` = from the SFT start (seed 0's noisy SFT policy)."""
INDEX = {label: i for i, (label, _) in enumerate(SETTINGS)}


def before_rl_configs(seeds: int, base: TrainConfig, start: str) -> tuple[list[TrainConfig], list[list[int]]]:
    """Every run of stage 2 and, per setting, its run indices; `start`: the folder of the SFT start's policy.pt."""
    def config(overrides: dict, seed: int) -> TrainConfig:
        settings = {k: v for k, v in overrides.items() if k != "start"}
        return base.replace(**settings, **({"init_from": start} if overrides.get("start") else {}), seed=seed)

    configs = [config(overrides, seed) for _, overrides in SETTINGS for seed in range(seeds)]
    return configs, [list(range(i * seeds, (i + 1) * seeds)) for i in range(len(SETTINGS))]


def section_work(seeds: int, base: TrainConfig, sweep_work) -> tuple[float, float]:
    """The estimated time of each stage of `run_before_rl` (`sweep_work` of its configs), for the progress."""
    return (sweep_work([base.replace(**SFT_NOISY, seed=s) for s in range(seeds)]),
            sweep_work(before_rl_configs(seeds, base, "the SFT start")[0]))


def run_before_rl(seeds: int, base: TrainConfig, run_sweep, task, device,
                  progress=None, start_progress=None) -> tuple[object, list[list[int]]]:
    """Stage 1 (the SFT start), then stage 2: the section's records and, per setting, its run indices.
    `start_progress` reports stage 1 and `progress` stage 2, each as `run_sweep` reports its own."""
    from lab.policies import policy_from_state
    from lab.policies.factorized import save_policy

    stage1 = run_sweep(task, [base.replace(**SFT_NOISY, seed=s) for s in range(seeds)], device=device,
                       progress=start_progress)
    with tempfile.TemporaryDirectory(prefix="lab-sft-start-") as folder:
        save_policy(policy_from_state(stage1.state, 0), Path(folder) / "policy.pt")
        configs, groups = before_rl_configs(seeds, base, folder)
        return run_sweep(task, configs, device=device, progress=progress), groups


def _t(interval: Interval, digits: int = 2) -> str:
    return f"{interval.estimate:.{digits}f} [{interval.low:.{digits}f}, {interval.high:.{digits}f}]"


def _paired(records, values: np.ndarray, a: list[int], b: list[int]) -> Interval:
    """mean(values[a]) - mean(values[b]) of two settings' runs, paired by seed (`seed_difference`)."""
    seeds = lambda runs: [records.configs[r].seed for r in runs]  # noqa: E731
    return seed_difference(values[a], values[b], seeds(a), seeds(b))


def _sign(interval: Interval) -> str:
    return "holds" if interval.low > 0 else "does not hold" if interval.high < 0 else "inconclusive"


def before_rl_markdown(records, groups: list[list[int]], seeds: int) -> list[str]:
    """The section: one row per setting, then the verdicts."""
    e, diverged = records.epoch_metrics, records.diverged()
    reward, kl = e["reward_exact"][:, -1], e["kl_initial_exact"][:, -1]
    first = records.configs[0]
    steps = first.epochs * first.steps
    drawn = first.epochs * first.group_size * records.prompts.shape[0]
    out = [f"{first.epochs} epochs x {first.steps} steps, G = {first.group_size}, {seeds} seeds paired by seed; "
           f"the SFT start is seed 0's SFT policy on noisy demonstrations (each token replaced with probability "
           f"{NOISE}), and it is the reference of the runs that start from it (beta = {BETA}). E[r] and the KL to the "
           "run's initial policy are exact (sums over the 125 responses of each prompt); the optimum is 5. A method that samples "
           f"from its policy to train (expert iteration, GRPO, DPO) draws {drawn} samples per run; SFT draws none "
           f"and trains on its {first.group_size * records.prompts.shape[0]} demonstrations; every run takes {steps} "
           "optimizer steps. Final = after the last epoch; mean over seeds [95% t]; success = the greedy response "
           "optimal on every prompt [95% Wilson].", "",
           "| setting | final E[r] (exact) | E[r] per 1000 samples drawn | greedy accuracy | success | KL to the "
           "initial policy (exact) | diverged |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for (label, overrides), runs in zip(SETTINGS, groups):
        kept = [r for r in runs if not diverged[r]]  # a diverged run has no final policy
        mean = lambda values: _t(mean_interval(values[kept])) if kept else "-"  # noqa: E731
        per_sample = ("-" if overrides.get("loss") == "sft" or not kept else
                      f"{reward[kept].mean() / drawn * 1000:.2f}")
        s = success(records, runs)
        out.append(f"| {label} | {mean(reward)} | {per_sample} | {mean(e['greedy_accuracy'][:, -1])} | "
                   f"{s.estimate:.0%} [{s.low:.0%}, {s.high:.0%}] | {mean(kl)} | "
                   f"{int(diverged[runs].sum())}/{len(runs)} |")
    g = lambda label: groups[INDEX[label]]  # noqa: E731
    rows = []
    rl = _paired(records, reward, g("GRPO"), g("SFT, noisy demonstrations"))
    rows.append(("RL beats imitation of noisy demonstrations", "final E[r], GRPO minus SFT (noisy), above 0",
                 _t(rl), _sign(rl)))
    ei = _paired(records, reward, g("expert iteration"), g("GRPO"))
    rows.append(("expert iteration reaches GRPO's reward at equal samples",
                 f"final E[r], expert iteration minus GRPO, above -{REACH}", _t(ei),
                 "holds" if ei.low > -REACH else "does not hold" if ei.high < -REACH else "inconclusive"))
    sorted_ = optimal_everywhere(records).astype(float)  # 1 where the final greedy response sorts every prompt
    for method in ("GRPO + KL", "DPO"):
        gain = _paired(records, sorted_, g(f"{method}, SFT start"), g(f"{method}, random start"))
        raw = success(records, g(f"{method}, random start"))
        rows.append((f"an SFT start makes {method} sort, where a random start does not",
                     "success, SFT start minus random start, above 0, and the random start's below 1/2",
                     f"{_t(gain)}; random start {raw.estimate:.0%} [{raw.low:.0%}, {raw.high:.0%}]",
                     "holds" if gain.low > 0 and raw.high < 0.5 else
                     "does not hold" if gain.estimate <= 0 or raw.low >= 0.5 else "inconclusive"))
    for method in ("GRPO + KL", "DPO"):
        better = _paired(records, reward, g(f"{method}, SFT start"), g(f"{method}, random start"))
        rows.append((f"an SFT reference is better than the raw one ({method}; start and reference together)",
                     "final E[r], SFT start minus random start, above 0", _t(better), _sign(better)))
    on, off = g("diverging setting, clipped at 1.0"), g("diverging setting")
    fewer = _paired(records, diverged.astype(float), on, off)
    free = wilson_interval(int(diverged[off].sum()), len(off))
    setting = ", ".join(f"{name} {value}" for name, value in DIVERGING.items())
    rows.append((f"clipping the gradient at {CLIP} keeps a diverging setting finite ({setting})",
                 "diverged seeds, clipped minus not, below 0",
                 f"{_t(fewer)}; without clipping {free.estimate:.0%} [{free.low:.0%}, {free.high:.0%}] diverge",
                 "holds" if fewer.high < 0 else "does not hold" if fewer.estimate >= 0 else "inconclusive"))
    lecture = _paired(records, reward, g("GRPO, clipped at 1.0"), g("GRPO"))
    fraction = records.step_metrics["grad_clipped"][g("GRPO, clipped at 1.0")].mean()
    out += ["", f"On the lecture's settings clipping at {CLIP} clips {fraction:.0%} of the steps and changes the final "
            f"E[r] by {_t(lecture)} (clipped minus not, paired by seed).", "",
            "| the sources say | decided by (rule in `lab/experiments/before_rl_results.py`) | 95% interval | "
            "verdict |", "| --- | --- | --- | --- |"]
    out += [f"| {claim} | {rule} | {numbers} | **{verdict}** |" for claim, rule, numbers, verdict in rows]
    return out


def plot_before_rl(records, groups: list[list[int]], path: Path, subtitle: str) -> Path:
    """Two panels against epochs, one mean curve per setting that did not diverge: the exact expected reward and
    the exact KL to the run's initial policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    diverged = records.diverged()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for axis, (name, title) in zip(axes, (("reward_exact", "exact E[r] (the optimum is 5)"),
                                          ("kl_initial_exact", "exact KL(pi_theta || the run's initial policy)"))):
        values = records.epoch_metrics[name]
        for (label, _), runs in zip(SETTINGS, groups):
            kept = [r for r in runs if not diverged[r]]
            if kept:
                axis.plot(np.arange(values.shape[1]), np.nanmean(values[kept], axis=0), label=label, lw=1.2)
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("epoch")
    axes[0].legend(fontsize=7)
    fig.suptitle(subtitle, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
