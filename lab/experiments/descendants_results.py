"""RESULTS.md's section on GRPO's descendants (issue 37): the exact lens from the lecture's initial policy, then paired
runs of each descendant against PPO's clip on the lecture's stuck setting, each paper's claim decided by a rule.

    lens      kept = <g_loss, g_on> / <g_on, g_on> after S plain steps on one batch (lab.exact.surrogate_lens)
    runs      SETTINGS x seeds 0..N-1, all at the lecture's shapes, centered deltas, init scale 1 (the exploration
              section's stuck setting), the lecture's clip eps 0.01; seeds paired across settings
    verdict   a paired 95% t-interval of (descendant - PPO) per seed: `sign_rule` (holds above 0, does not hold where
              never above 0, else inconclusive) or `equivalence_rule` (within +-MARGIN: holds; outside it: does not hold);
              beside each the smallest effect the seeds could detect, (t_0.975 + t_0.8) s_d / sqrt(n) (80% power)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from scipy import stats

from lab.experiments.intervals import Interval, mean_interval, seed_difference, wilson_interval
from lab.experiments.sweep import optimal_everywhere
from lab.training.config import TrainConfig

COMMON = {"delta": "centered", "init_scale": 1.0, "optimum_metrics": True}
"""The lecture's stuck setting (exploration section), with the exact reward recorded."""
PPO = "PPO's clip (eps 0.01)"
SETTINGS = (
    (PPO, {"loss": "clipped"}),
    ("clip-higher (eps_high 0.014)", {"loss": "clipped", "epsilon_high": 0.014}),
    ("CISPO (eps_max 5)", {"loss": "cispo"}),
    ("GSPO's sequence ratio", {"loss": "clipped", "importance_sampling_level": "sequence"}),
    ("SAPO", {"loss": "sapo"}),
    ("top 20% of tokens by entropy", {"loss": "clipped", "top_entropy_quantile": 0.2}),
)
"""(label, overrides of the lecture's settings): the clip-higher bound is DAPO's 0.28 / 0.2 times the lecture's eps."""
INDEX = {label: i for i, (label, _) in enumerate(SETTINGS)}
MARGIN = 0.1
"""The equivalence margin of the 80/20 claim, in exact expected reward (the optimum is 5)."""
LENS_STEPS, LENS_LR = 10, 0.1
"""The lens's S plain gradient steps and their size on one batch."""


def descendant_configs(seeds: int, base: TrainConfig) -> tuple[list[TrainConfig], list[list[int]]]:
    configs = [base.replace(**COMMON, **overrides, seed=s) for _, overrides in SETTINGS for s in range(seeds)]
    return configs, [list(range(i * seeds, (i + 1) * seeds)) for i in range(len(SETTINGS))]


def run_descendants(seeds: int, base: TrainConfig, run_sweep, task, device, progress=None) -> dict:
    """The section's records, its run groups and the exact lens (one batch: every setting shares the shapes)."""
    configs, groups = descendant_configs(seeds, base)
    return {"records": run_sweep(task, configs, device=device, progress=progress), "groups": groups,
            "lens": lens_rows(task, base)}


def lens_rows(task, base: TrainConfig) -> list:
    """The exact lens from the lecture's initial policy (seed 5) for each setting's loss."""
    from lab.exact.enumeration import reward_table
    from lab.exact.surrogate_lens import descendant_lens
    from lab.policies.factorized import Policy

    policy = Policy(task.vocab_size, task.prompts.shape[1], task.response_length, base.dim,
                    generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        logits = policy(task.prompts).double()
    rewards = reward_table(task.prompts, base.reward, task.vocab_size, task.response_length)
    losses = {label: loss_settings(base.replace(**COMMON, **overrides)) for label, overrides in SETTINGS}
    return descendant_lens(logits, rewards, losses, LENS_LR, LENS_STEPS)


def loss_settings(config: TrainConfig) -> dict:
    """A config's loss as `compute_loss` settings: its entry's numbers as the run reads them (CISPO's filled cap
    among them), its ratio level and its top-entropy share."""
    entry = config.loss.entry
    numbers = {name: config.loss_setting(name) for name in entry.settings if name != "importance_sampling_level"}
    return {"loss": config.loss.value, **numbers, "importance_sampling_level": config.importance_sampling_level.value,
            "top_entropy_quantile": config.top_entropy_quantile}


def detectable(a: np.ndarray, b: np.ndarray) -> float:
    """The smallest paired difference the seeds detect with 80% power at 5%: (t_0.975 + t_0.8) s_d / sqrt(n)."""
    d = np.asarray(a, float) - np.asarray(b, float)
    n = len(d)
    if n < 2 or d.std(ddof=1) == 0:  # no seed differs from its pair: no spread to size an effect by
        return float("nan")
    return float((stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * d.std(ddof=1) / np.sqrt(n))


def sign_rule(interval: Interval) -> str:
    """Above 0: holds; never above 0 (high <= 0, as where no seed differs): does not hold; else inconclusive."""
    return "holds" if interval.low > 0 else "does not hold" if interval.high <= 0 else "inconclusive"


def equivalence_rule(interval: Interval, margin: float = MARGIN) -> str:
    if -margin < interval.low and interval.high < margin:
        return "holds"
    return "does not hold" if interval.low > margin or interval.high < -margin else "inconclusive"


def _t(interval: Interval, digits: int = 3) -> str:
    return f"{interval.estimate:.{digits}f} [{interval.low:.{digits}f}, {interval.high:.{digits}f}]"


def section_lines(result: dict, seeds: int) -> list[str]:
    """The section's markdown lines: the lens table, the runs' table, the verdicts."""
    records, groups = result["records"], result["groups"]
    first = records.configs[0]
    reward = records.epoch_metrics["reward_exact"][:, -1]
    steps = first.steps
    entropy = records.step_metrics["entropy"][:, ::steps][:, -1]
    clip = np.nanmean(records.step_metrics["clip_fraction"], axis=1)
    solved = optimal_everywhere(records).astype(float)
    out = ["## GRPO's descendants: what each changes in the expected update, then trained "
           "(DAPO, GSPO, MiniMax-M1, SAPO, the 80/20 paper)", "",
           f"**The exact lens** (`lab/exact/surrogate_lens.py`, claims 36-40): from the lecture's initial policy (seed "
           f"5), {LENS_STEPS} plain gradient steps of size {LENS_LR} on one batch's expected surrogate (pi_old's "
           "samples, every response enumerated), then each loss's expected gradient against the on-policy one. At "
           "theta_old every loss has the policy gradient (claim 36); the top-entropy gate keeps only its positions'.", "",
           "| loss | share of the on-policy gradient kept | cosine | max logit moved |", "| --- | --- | --- | --- |"]
    out += [f"| {row.name} | {row.kept:.3f} | {row.cosine:.3f} | {row.moved:.4f} |" for row in result["lens"]]
    out += ["", f"**Trained**: {first.epochs} epochs x {first.steps} steps, G = {first.group_size}, centered deltas, "
            f"the lecture's initialisation (its stuck setting), clip eps {first.clip_eps}; {seeds} seeds paired by "
            "seed. Final E[r] exact (the optimum is 5), final entropy of the sampling policy (nats per position), "
            "success = the greedy response optimal on every prompt [95% Wilson], clip fraction over all steps.", "",
            "| setting | final E[r] (exact) | final entropy | success | clip fraction |", "| --- | --- | --- | --- | --- |"]
    for (label, _), runs in zip(SETTINGS, groups):
        s = wilson_interval(int(solved[runs].sum()), len(runs))
        out.append(f"| {label} | {_t(mean_interval(reward[runs]))} | {_t(mean_interval(entropy[runs]))} | "
                   f"{s.estimate:.0%} [{s.low:.0%}, {s.high:.0%}] | {np.nanmean(clip[runs]):.3f} |")
    out += ["", "| the source says | decided by (rule in `lab/experiments/descendants_results.py`) | 95% interval | "
            "smallest detectable | verdict |", "| --- | --- | --- | --- | --- |"]
    out += [f"| {c} | {r} | {i} | {'n/a' if np.isnan(m) else f'{m:.3f}'} | **{v}** |"
            for c, r, i, m, v in verdict_rows(records, groups)]
    return out


def verdict_rows(records, groups: list[list[int]]) -> list[tuple]:
    """(claim, rule, interval, smallest detectable effect, verdict) per claim, each paired by seed against PPO."""
    steps = records.configs[0].steps
    reward = records.epoch_metrics["reward_exact"][:, -1]
    entropy = records.step_metrics["entropy"][:, ::steps][:, -1]
    solved = optimal_everywhere(records).astype(float)
    seeds = lambda runs: [records.configs[r].seed for r in runs]  # noqa: E731
    ppo = groups[INDEX[PPO]]

    def row(claim, rule_text, values, label, rule=sign_rule):
        runs = groups[INDEX[label]]
        interval = seed_difference(values[runs], values[ppo], seeds(runs), seeds(ppo))
        return (claim, rule_text, _t(interval), detectable(values[runs], values[ppo]), rule(interval))

    higher = "clip-higher (eps_high 0.014)"
    return [
        row("clip-higher keeps the policy's entropy up (DAPO)", "final entropy, clip-higher minus PPO, above 0",
            entropy, higher),
        row("clip-higher helps the lecture's stuck runs (DAPO)", "success, clip-higher minus PPO, above 0", solved,
            higher),
        row("CISPO keeps the gradient PPO's clip drops, and learns faster (MiniMax-M1)",
            "final E[r], CISPO minus PPO, above 0", reward, "CISPO (eps_max 5)"),
        row("the sequence ratio makes training better (GSPO; its variance claim: claim 39)",
            "final E[r], GSPO minus PPO, above 0", reward, "GSPO's sequence ratio"),
        row("SAPO's soft gate beats the hard clip (SAPO)", "final E[r], SAPO minus PPO, above 0", reward, "SAPO"),
        row("training on the top 20% of tokens by entropy matches training on all (the 80/20 paper)",
            f"final E[r], top 20% minus PPO, within +-{MARGIN}", reward, "top 20% of tokens by entropy",
            equivalence_rule),
    ]


def plot_descendants(result: dict, path: Path) -> Path:
    """Two panels against epochs, one mean curve per setting: the exact E[r] and the sampling policy's entropy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records, groups = result["records"], result["groups"]
    steps = records.configs[0].steps
    series = (("exact E[r] (the optimum is 5)", records.epoch_metrics["reward_exact"]),
              ("entropy of the sampling policy (nats per position)", records.step_metrics["entropy"][:, ::steps]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for axis, (title, values) in zip(axes, series):
        for (label, _), runs in zip(SETTINGS, groups):
            axis.plot(np.arange(values.shape[1]), np.nanmean(values[runs], axis=0), label=label, lw=1.2)
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("epoch")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"GRPO's descendants on the lecture's stuck setting; {len(groups[0])} seeds, mean over seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
