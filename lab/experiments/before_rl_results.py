"""RESULTS.md's "Before RL" section: SFT, expert iteration and GRPO on the same task, RL from an SFT start, clipping.

    stage 1   SFT on noisy demonstrations, seeds 0..N-1: seed s's final policy is seed s's SFT start
    stage 2   SFT (optimal, noisy), expert iteration (reward >= THRESHOLD), GRPO (centered, clipped), at the lecture's
              init and at init scale 0.1 (SFT noisy and GRPO), GRPO + KL and DPO from the random start and from
              each seed's own SFT start (the start is the reference), the lecture's GRPO with and without
              --max-grad-norm 1.0, and a setting that diverges without clipping, with and without, under Adam and
              under plain SGD
    measured  after the last epoch: the exact expected reward and KL to the run's initial policy (sums over the 125
              responses of each prompt), greedy accuracy, success (the greedy response optimal on every prompt),
              samples drawn from the policy to train on, optimizer steps

Every setting runs the same seeds, so comparisons are paired by seed. Verdict rules (lab/experiments/verdicts.py,
tested on planted effects; 95% paired t-intervals; effect of interest REACH = 5% of the optimum; beside each the
smallest effect the design detects at 80% power):
- "RL beats imitation of noisy demonstrations", at the lecture's init and at init 0.1: `above`, GRPO minus SFT
  (noisy), final exact E[r].
- "expert iteration reaches GRPO's reward at equal samples" (both draw G per prompt each epoch): non-inferiority,
  `above` with margin -REACH: expert iteration minus GRPO, final exact E[r].
- "RL from an SFT start improves on its start" (GRPO + KL, DPO): `above`, final E[r] from seed s's SFT start minus
  that start's own E[r] (the stage-2 SFT noisy run of seed s, the start's config).
- "an SFT reference is better than the raw one" (the lab's reference is the run's start, so start and reference
  change together): `above`, from SFT minus from random, final exact E[r], per method.
- "clipping the gradient at 1.0 keeps a diverging setting finite": `below`, diverged (1 or 0 per seed) with clipping
  minus without, effect of interest 1/2 of the seeds; under Adam and under plain SGD. Adam's first step is
  lr sign(g) whatever the gradient's norm, so there clipping cannot keep the first steps small and the verdict can
  hardly hold; SGD's step scales with the gradient, where clipping can matter (issue 35).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from lab.experiments import verdicts as v
from lab.experiments.exploration_results import success
from lab.experiments.intervals import Interval, mean_interval, seed_difference, wilson_interval
from lab.training.config import TrainConfig
from lab.training.objective import objective

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
overflows); clipping acts on the gradient, so whether it helps is what the verdict decides. Under Adam it cannot:
the first step is lr sign(g) whatever the gradient's norm (tests/training/test_optimizers.py)."""
DIVERGING_SGD = dict(optimizer="sgd", lr=0.3, kl=1.0, kl_period=0)
"""The same penalty under plain SGD, whose step scales with the gradient: k3's gradient, pi_ref / pi per token,
grows without bound as a token's probability falls, and clipping the gradient's norm bounds the step."""

EXPLORING_INIT = 0.1
"""The init scale of the second arm: a flat policy that explores, where GRPO sorts (the exploration section)."""

GRPO = dict(delta="centered", loss="clipped", optimum_metrics=True)
SFT_NOISY = dict(loss="sft", demos="noisy", demo_noise=NOISE)
SETTINGS = (
    ("SFT, optimal demonstrations", dict(loss="sft")),
    ("SFT, noisy demonstrations", SFT_NOISY),
    ("expert iteration", dict(loss="expert-iteration", ei_filter="threshold", reward_threshold=THRESHOLD)),
    ("GRPO", GRPO),
    ("SFT, noisy demonstrations, init 0.1", dict(SFT_NOISY, init_scale=EXPLORING_INIT)),
    ("GRPO, init 0.1", dict(GRPO, init_scale=EXPLORING_INIT)),
    ("GRPO + KL, random start", dict(GRPO, kl=BETA, kl_period=0)),
    ("DPO, random start", dict(loss="dpo", kl=BETA, optimum_metrics=True)),
    ("GRPO + KL, SFT start", dict(GRPO, kl=BETA, kl_period=0, start=True)),
    ("DPO, SFT start", dict(loss="dpo", kl=BETA, optimum_metrics=True, start=True)),
    ("GRPO, clipped at 1.0", dict(GRPO, max_grad_norm=CLIP)),
    ("diverging setting", dict(GRPO, **DIVERGING)),
    ("diverging setting, clipped at 1.0", dict(GRPO, **DIVERGING, max_grad_norm=CLIP)),
    ("diverging setting, SGD", dict(GRPO, **DIVERGING_SGD)),
    ("diverging setting, SGD, clipped at 1.0", dict(GRPO, **DIVERGING_SGD, max_grad_norm=CLIP)),
)
"""(label, overrides of the lecture's settings); `start` = from the run's own seed's SFT start (its noisy SFT policy)."""
INDEX = {label: i for i, (label, _) in enumerate(SETTINGS)}


def before_rl_configs(seeds: int, base: TrainConfig, starts) -> tuple[list[TrainConfig], list[list[int]]]:
    """Every run of stage 2 and, per setting, its run indices; `starts[s]`: the folder of seed s's SFT start."""
    def config(overrides: dict, seed: int) -> TrainConfig:
        settings = {k: v for k, v in overrides.items() if k != "start"}
        return base.replace(**settings, **({"init_from": starts[seed]} if overrides.get("start") else {}), seed=seed)

    configs = [config(overrides, seed) for _, overrides in SETTINGS for seed in range(seeds)]
    return configs, [list(range(i * seeds, (i + 1) * seeds)) for i in range(len(SETTINGS))]


def section_work(seeds: int, base: TrainConfig, sweep_work) -> tuple[float, float]:
    """The estimated time of each stage of `run_before_rl` (`sweep_work` of its configs), for the progress."""
    return (sweep_work([base.replace(**SFT_NOISY, seed=s) for s in range(seeds)]),
            sweep_work(before_rl_configs(seeds, base, ["the SFT start"] * seeds)[0]))


def run_before_rl(seeds: int, base: TrainConfig, run_sweep, task, device,
                  progress=None, start_progress=None) -> tuple[object, list[list[int]]]:
    """Stage 1 (the SFT start), then stage 2: the section's records and, per setting, its run indices.
    `start_progress` reports stage 1 and `progress` stage 2, each as `run_sweep` reports its own."""
    from lab.policies import policy_from_state
    from lab.policies.factorized import save_policy

    stage1 = run_sweep(task, [base.replace(**SFT_NOISY, seed=s) for s in range(seeds)], device=device,
                       progress=start_progress)
    with tempfile.TemporaryDirectory(prefix="lab-sft-start-") as folder:
        starts = [Path(folder) / f"seed{seed}" for seed in range(seeds)]
        for seed, start in enumerate(starts):  # stage 1's runs are in seed order
            start.mkdir()
            save_policy(policy_from_state(stage1.state, seed), start / "policy.pt")
        configs, groups = before_rl_configs(seeds, base, [str(start) for start in starts])
        return run_sweep(task, configs, device=device, progress=progress), groups


def _t(interval: Interval, digits: int = 2) -> str:
    return f"{interval.estimate:.{digits}f} [{interval.low:.{digits}f}, {interval.high:.{digits}f}]"


def _paired(records, values: np.ndarray, a: list[int], b: list[int]) -> Interval:
    """mean(values[a]) - mean(values[b]) of two settings' runs, paired by seed (`seed_difference`)."""
    seeds = lambda runs: [records.configs[r].seed for r in runs]  # noqa: E731
    return seed_difference(values[a], values[b], seeds(a), seeds(b))


def before_rl_markdown(records, groups: list[list[int]], seeds: int) -> list[str]:
    """The section: one row per setting, then the verdicts."""
    e, diverged = records.epoch_metrics, records.diverged()
    reward, kl = e["reward_exact"][:, -1], e["kl_initial_exact"][:, -1]
    first = records.configs[0]
    steps = first.epochs * first.steps
    drawn = first.epochs * first.group_size * records.prompts.shape[0]
    out = [f"{first.epochs} epochs x {first.steps} steps, G = {first.group_size}, {seeds} seeds paired by seed; "
           f"each seed's SFT start is that seed's SFT policy on noisy demonstrations (each token replaced with probability "
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
    horizon = records.prompts.shape[1]
    kl_settings = [(label, objective(records.configs[runs[0]], horizon)) for (label, _), runs in zip(SETTINGS, groups)]
    out += ["", "What each KL'd setting ascends (lab.training.objective; the reference is the run's start, frozen): "
            + "; ".join(f"{label}: {o.line()}" for label, o in kl_settings if o is not None) + "."]
    g = lambda label: groups[INDEX[label]]  # noqa: E731
    seeds_of = lambda runs: [records.configs[r].seed for r in runs]  # noqa: E731
    paired = lambda values, a, b: v.pair(values[g(a)], seeds_of(g(a)), values[g(b)], seeds_of(g(b)))  # noqa: E731
    rows = []
    for arm, rl, sft in (("the lecture's init", "GRPO", "SFT, noisy demonstrations"),
                         (f"init {EXPLORING_INIT}", "GRPO, init 0.1", "SFT, noisy demonstrations, init 0.1")):
        rows.append((f"RL beats imitation of noisy demonstrations ({arm})", f"final E[r], {rl} minus {sft}, above 0",
                     v.above(*paired(reward, rl, sft), effect=REACH)))
    rows.append(("expert iteration reaches GRPO's reward at equal samples",
                 f"final E[r], expert iteration minus GRPO, above -{REACH} (non-inferiority)",
                 v.above(*paired(reward, "expert iteration", "GRPO"), margin=-REACH, refute=-REACH, effect=REACH)))
    for method in ("GRPO + KL", "DPO"):
        rows.append((f"RL from an SFT start improves on its start ({method})", "final E[r] from seed s's SFT start "
                     "minus that start's E[r] (the SFT noisy run of seed s), above 0",
                     v.above(*paired(reward, f"{method}, SFT start", "SFT, noisy demonstrations"), effect=REACH)))
    for method in ("GRPO + KL", "DPO"):
        rows.append((f"an SFT reference is better than the raw one ({method}; start and reference together)",
                     "final E[r], SFT start minus random start, above 0",
                     v.above(*paired(reward, f"{method}, SFT start", f"{method}, random start"), effect=REACH)))
    for name, overrides in (("diverging setting", DIVERGING), ("diverging setting, SGD", DIVERGING_SGD)):
        off = g(name)
        free = wilson_interval(int(diverged[off].sum()), len(off))
        setting = ", ".join(f"{key} {value}" for key, value in overrides.items())
        rows.append((f"clipping the gradient at {CLIP} keeps a diverging setting finite "
                     f"({'Adam, ' if 'optimizer' not in overrides else ''}{setting}; without clipping "
                     f"{free.estimate:.0%} [{free.low:.0%}, {free.high:.0%}] diverge)",
                     "diverged seeds, clipped minus not, below 0; effect of interest half the seeds",
                     v.below(*paired(diverged.astype(float), f"{name}, clipped at 1.0", name), effect=0.5)))
    lecture = _paired(records, reward, g("GRPO, clipped at 1.0"), g("GRPO"))
    fraction = records.step_metrics["grad_clipped"][g("GRPO, clipped at 1.0")].mean()
    out += ["", f"On the lecture's settings clipping at {CLIP} clips {fraction:.0%} of the steps and changes the final "
            f"E[r] by {_t(lecture)} (clipped minus not, paired by seed).", "",
            "| the sources say | decided by (rule in `lab/experiments/verdicts.py`) | 95% interval | detectable at 80% "
            "power / needed | verdict |", "| --- | --- | --- | --- | --- |"]
    out += [f"| {claim} | {rule} " + v.cells(verdict, digits=2) for claim, rule, verdict in rows]
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
