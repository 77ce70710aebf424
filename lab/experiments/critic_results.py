"""The critic experiment: PPO's learned critic (`--delta gae`) against GRPO's group baseline.

    factorised policy, the lecture's task and schedule, seeds 0..N-1, each setting its own batch:
        GRPO normalized G = 10,  GRPO centered G = 10,  gae G = 10 (equal samples per epoch),  gae G = 1 (equal epochs),
        gae G = 10 with its advantages whitened over the batch (verl's and TRL's choice; the lab's is off)
    autoregressive policy:  GRPO centered G = 10,  gae G = 10 with lambda in {0, 0.9, 1}
    exact, per run: value_error_exact every epoch (by position for the autoregressive policy); for the factorised
        policy tr Cov[g] per prompt of each run's own estimator at its start and its end (`lab.exact.critic_moments`:
        the group estimator for GRPO, the GAE estimator with the run's critic for gae; no whitening)

Verdicts (lab/experiments/verdicts.py, tested on planted effects; 95% intervals over seeds, beside each the
smallest effect its design detects at 80% power; `late` = the mean over the last LATE_EPOCHS epochs):
- "the critic reduces the gradient's variance": per factorised gae run at its end, log(tr Cov[g] with its learned
  critic / tr Cov[g] without a baseline, the same policy and G); `below` 0, effect of interest log 0.9 (a 10%
  reduction).
- "under a terminal reward the critic's regression is hard, and harder at early tokens", per lambda (the three
  settings share seeds, so they are not pooled): per autoregressive gae run, late value_error_exact at t = 0 minus
  the visit-weighted mean of the late errors at t >= 1 (weights: the final policy's exact expected visits per
  position, so a position few responses reach weighs little); `above` 0, effect of interest ERROR_EFFECT.
- "the group mean is a low-cost substitute for the critic": final mean reward of GRPO centered G = 10 minus gae
  G = 10 (factorised, equal samples per epoch; the same seeds, so a paired t-interval,
  `lab.experiments.verdicts.within` +-MARGIN x the optimum; the exact variance per sample and the samples per epoch beside it (the
  seconds are `lab bench`'s gae row: a timing cannot be reproduced byte for byte, so RESULTS.md holds none).
Pure: training is `lab.training.train.train`; the figure is `lab.experiments.critic_figures`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from lab.exact import critic_moments
from lab.exact import values as exact_values
from lab.experiments import verdicts as v
from lab.experiments.intervals import mean_interval, seed_difference, wilson_interval
from lab.experiments.sweep import optimal_everywhere
from lab.experiments.work import Stages, batch_work
from lab.policies import make_policy, policy_from_state
from lab.policies.critic import CRITICS
from lab.training.config import TrainConfig
from lab.training.records import Records
from lab.training.train import train

FACTORISED = ({"delta": "normalized"}, {"delta": "centered"}, {"delta": "gae"}, {"delta": "gae", "group_size": 1},
              {"delta": "gae", "whiten_advantages": True})
AUTOREGRESSIVE = tuple({"policy": "autoregressive", **o} for o in (
    {"delta": "centered"}, *({"delta": "gae", "gae_lambda": lam} for lam in (0.0, 0.9, 1.0))))
SETTINGS = FACTORISED + AUTOREGRESSIVE
LATE_EPOCHS = 10
MARGIN = 0.05
"""'Little difference' in final mean reward: within this fraction of the optimum (as `lab.experiments.results`)."""
VARIANCE_EFFECT = -math.log(0.9)
"""The variance verdict's effect of interest on log(tr Cov ratio): a 10% reduction."""
ERROR_EFFECT = 0.01
"""The by-position verdict's effect of interest on the late exact critic error (reward units squared)."""


@dataclass
class CriticRuns:
    """One `Records` per setting (each trained alone, so its seconds are its own), in `SETTINGS` order."""

    records: list[Records]
    seeds: int


def critic_configs(seeds: int, base: TrainConfig) -> list[list[TrainConfig]]:
    """Each setting's runs, seed order."""
    return [[base.replace(**overrides, seed=s) for s in range(seeds)] for overrides in SETTINGS]


def run_critic_experiment(seeds: int, base: TrainConfig, device="cpu", progress=None) -> CriticRuns:
    """Every setting's seeds as one batch; `progress(done, total)` over all settings, each weighed by its work."""
    settings = critic_configs(seeds, base)
    stages = Stages(progress, [batch_work(configs) for configs in settings])
    return CriticRuns([train(_task(), configs, device=device, progress=stages(i))
                       for i, configs in enumerate(settings)], seeds)


def _task():
    from tasks.catalog import default_task

    return default_task()


def label(overrides: dict) -> str:
    policy = "autoregressive" if overrides.get("policy") == "autoregressive" else "factorised"
    name = "GRPO " + overrides["delta"] if overrides["delta"] != "gae" else "gae"
    extra = f", lambda = {overrides['gae_lambda']:g}" if "gae_lambda" in overrides else ""
    extra += ", whitened" if overrides.get("whiten_advantages") else ""
    return f"{policy}: {name}, G = {overrides.get('group_size', 10)}{extra}"


def late(records: Records, metric: str) -> np.ndarray:
    return np.nanmean(records.epoch_metrics[metric][:, -LATE_EPOCHS:], axis=1)


def _estimator_variance(records: Records, run: int, start: bool) -> float:
    """Exact tr Cov[g] per prompt (mean over the prompts) of run `run`'s own estimator, at its start or end."""
    config, prompts = records.configs[run], torch.as_tensor(records.prompts)
    if start:
        policy = make_policy(config.policy, 5, prompts.shape[1], prompts.shape[1], config.dim,
                             torch.Generator().manual_seed(config.seed), config.init_scale)
    else:
        policy = policy_from_state(records.state, run)
    if config.delta.value != "gae":
        moments = critic_moments.group_moments(policy, prompts, config.reward, config.delta, config.group_size)
        return float(moments.trace_cov.mean())
    values = torch.zeros(len(prompts), dtype=torch.float64)  # every critic starts at V = 0
    if not start:
        index = records.critic_runs.index(run)
        params = {name: value[index].double() for name, value in records.critic_state.items()}
        values = CRITICS[config.policy].values(params, prompts, torch.zeros(len(prompts), 1, prompts.shape[1],
                                                                            dtype=torch.long))[..., 0, 0]
    moments = critic_moments.gae_moments(policy, prompts, config.reward, values, 1.0, config.group_size)
    return float(moments.trace_cov.mean())


def variances(runs: CriticRuns) -> dict[int, np.ndarray]:
    """Per factorised setting, float[seed 2]: the exact tr Cov at the start and the end."""
    return {i: np.array([[_estimator_variance(runs.records[i], r, s) for s in (True, False)]
                         for r in range(runs.seeds)])
            for i, overrides in enumerate(FACTORISED) if not overrides.get("whiten_advantages")}


def _raw_variance_at_end(records: Records, run: int) -> float:
    config, prompts = records.configs[run], torch.as_tensor(records.prompts)
    policy = policy_from_state(records.state, run)
    raw = critic_moments.group_moments(policy, prompts, config.reward, "raw", config.group_size)
    return float(raw.trace_cov.mean())


def visits_by_position(records: Records, run: int) -> np.ndarray:
    """The final policy's expected visits per position, summed over the prompts: float[pos] (t = 0: one per prompt;
    later t: the chance a response reaches t without EOS before it)."""
    policy, prompts = policy_from_state(records.state, run), torch.as_tensor(records.prompts)
    return np.array([float(v.sum()) for v in exact_values.visit_probs(policy, prompts)])


def early_minus_later(records: Records) -> np.ndarray:
    """Per run: the late exact error at t = 0 minus the visit-weighted mean of the late errors at t >= 1, so that
    a position few responses reach (EOS came before it) weighs little: float[run]."""
    out = []
    for run in range(len(records.configs)):
        visits = visits_by_position(records, run)
        errors = np.array([late(records, f"value_error_exact_{t}")[run] for t in range(len(visits))])
        known = ~np.isnan(errors[1:])
        out.append(errors[0] - float((visits[1:][known] * errors[1:][known]).sum() / visits[1:][known].sum()))
    return np.array(out)


def critic_markdown(runs: CriticRuns) -> list[str]:
    """The RESULTS.md section: per setting reward, success, exact critic error, variance, networks trained; then verdicts."""
    var = variances(runs)
    lines = ["| setting | samples / epoch | final mean reward [95% t] | optimal on every prompt [95% Wilson] | "
             "late value_error_exact [95% t] | tr Cov[g] per prompt, start -> end (mean) | networks trained |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for i, (overrides, records) in enumerate(zip(SETTINGS, runs.records)):
        config = records.configs[0]
        success = wilson_interval(int(optimal_everywhere(records).sum()), runs.seeds)
        error = (mean_interval(late(records, "value_error_exact")).text(3) if config.delta.value == "gae" else "-")
        variance = f"{var[i][:, 0].mean():.2f} -> {var[i][:, 1].mean():.2f}" if i in var else "not computed"
        lines.append(f"| {label(overrides)} | {len(records.prompts) * config.group_size} | "
                     f"{mean_interval(records.final('mean_reward')).text(3)} | {success.estimate:.0%} "
                     f"[{success.low:.0%}, {success.high:.0%}] | {error} | {variance} | "
                     f"{'policy + critic' if config.delta.value == 'gae' else 'policy'} |")
    lines += ["", *_by_position(runs), "", *_verdicts(runs, var)]
    return lines


def _by_position(runs: CriticRuns) -> list[str]:
    ar = [(o, r) for o, r in zip(SETTINGS, runs.records) if o.get("policy") == "autoregressive" and o["delta"] == "gae"]
    length = ar[0][1].configs[0].max_length or len(ar[0][1].prompts[0]) + 2
    lines = ["Exact critic error by position, late in training (autoregressive policy, mean over seeds [95% t]):", "",
             "| setting | " + " | ".join(f"t = {t}" for t in range(length)) + " |",
             "| --- | " + " | ".join("---" for _ in range(length)) + " |"]
    for overrides, records in ar:
        cells = [mean_interval(late(records, f"value_error_exact_{t}")).text(3) for t in range(length)]
        lines.append(f"| {label(overrides)} | " + " | ".join(cells) + " |")
    for overrides, records in ar:
        visits = np.mean([visits_by_position(records, r) for r in range(len(records.configs))], axis=0)
        share = visits / visits.sum()
        lines.append(f"| share of visits, {label(overrides)} (final policies) | " +
                     " | ".join(f"{v:.2%}" for v in share) + " |")
    return lines


def _verdicts(runs: CriticRuns, var: dict[int, np.ndarray]) -> list[str]:
    rows = ["| the material says | decided by (rule in `lab/experiments/verdicts.py`) | 95% interval | detectable at "
            "80% power / needed | verdict |", "| --- | --- | --- | --- | --- |"]
    ratios = [math.log(var[i][r, 1] / _raw_variance_at_end(runs.records[i], r))
              for i in (2, 3) for r in range(runs.seeds)]
    rows.append("| the critic reduces the gradient's variance | log(tr Cov with the learned critic / without a "
                "baseline) at the end, factorised gae runs, below 0; effect of interest log 0.9 "
                + v.cells(v.below(np.array(ratios), effect=VARIANCE_EFFECT), digits=2))
    for overrides, records in zip(SETTINGS, runs.records):
        if overrides.get("policy") != "autoregressive" or overrides["delta"] != "gae":
            continue
        rows.append(f"| under a terminal reward the critic's regression is harder at early tokens "
                    f"(lambda = {overrides['gae_lambda']:g}) | late exact error at t = 0 minus its visit-weighted "
                    f"mean over t >= 1 (weights: the final policy's expected visits per position), per seed, above 0; "
                    f"effect of interest {ERROR_EFFECT} " + v.cells(v.above(early_minus_later(records),
                                                                          effect=ERROR_EFFECT)))
    grpo, gae = runs.records[1], runs.records[2]
    optimum = float(grpo.optimum.mean())
    seeds = lambda records: [c.seed for c in records.configs]  # noqa: E731
    paired = v.pair(grpo.final("mean_reward"), seeds(grpo), gae.final("mean_reward"), seeds(gae))
    per_sample = [var[i][:, 1].mean() * runs.records[i].configs[0].group_size for i in (1, 2)]
    rows.append(f"| the group mean is a low-cost substitute for the critic | final mean reward, GRPO centered minus "
                f"gae, G = 10, paired, within +-{MARGIN:.0%} of the optimum "
                + v.cells(v.within(*paired, margin=MARGIN * optimum)))
    whitened = seed_difference(runs.records[4].final("mean_reward"), gae.final("mean_reward"),
                               seeds(runs.records[4]), seeds(gae))
    return rows + ["", f"Whitening the advantages over the batch (verl, TRL) against not (the lab's default), gae "
                   f"G = 10, factorised: final mean reward difference {whitened.text(3)} (whitened minus not).",
                   "", "Beside the last verdict, at the end, tr Cov per prompt x G (the variance per sample): GRPO "
                   f"centered {per_sample[0]:.2f}, gae {per_sample[1]:.2f}; the critic costs a second network's forward and "
                   "backward pass per step and its own Adam state (seconds: `lab bench`'s gae row, docs/speed.md).", "",
                   "Each setting's seeds train as one batch, the lecture's schedule otherwise (100 epochs x 10 steps, "
                   "Adam lr 1e-3 for the policy and the critic, naive loss, inclusion-ordering). gae: the critic of "
                   "`lab/policies/critic.py`, GAE with gamma = 1, advantages not whitened, value clip 0.5; on the "
                   "factorised policy lambda does not matter (one state per response). tr Cov[g] is exact "
                   "(`lab/exact/critic_moments.py`) for each run's own estimator, summed over tokens, per prompt "
                   "and averaged over prompts and seeds: the group estimator for GRPO, the GAE estimator with the "
                   "run's critic for gae (at the start every critic is 0, so it is the estimator without a "
                   "baseline); not computed for the whitened runs (whitening couples a batch's responses: no exact "
                   "form here) nor for the autoregressive policy (3,906 responses per prompt). Verdict "
                   "rules: the docstring of `lab/experiments/critic_results.py`; the exact statements behind them: "
                   "claims 22-25 in `docs/claims.md`."]
