"""RESULTS.md's section on what is sampled and from which policy (issue 38): its runs and its exact numbers.

    trained (paired: every setting runs seeds 0..N-1 at the reproduction's epochs and steps, the lecture's stuck
    setting of centered deltas and the clipped loss unless stated)
        dynamic      plain | --dynamic-sampling (cap 10)                   success, groups drawn
        stale        K = 0 | K = 20 | K = 20 + token-truncate | K = 20 + sequence-mask    final mean reward
        reference    beta 0.1, frozen (kl_period 0) | synced (alpha 0.6 every 100 steps)  exact KL to pi_0
        entropy      --entropy-coef 0.03 fixed | adaptive, target 0.3 nats               |H - 0.3| late
    exact (no sampling; the lecture's prompts, the tabular per-position class, lab.exact)
        cost         S_N(q_b) at each seed's initial policy against the groups its first epoch drew
        bias         relative bias and variance of one response's update under a stale sampler (K steps back
                     along the exact expected-update path) and a mismatched one (temperature T_s), per correction
        reference    the frozen, periodic and synced iterations' expected reward and KL to pi_0
"""

from __future__ import annotations

import math

import numpy as np
import torch

from lab.exact.dynamic_sampling import expected_draws, no_signal_probability, value_probs
from lab.exact.enumeration import reward_table
from lab.exact.reference_flow import follow_reference
from lab.exact.sampler_bias import relative_bias, response_tables, sampler_update
from lab.training.config import TrainConfig
from lab.training.kinds import Factorized
from lab.training.runs import RunGroups
from tasks.catalog import default_task

STUCK = {"delta": "centered", "loss": "clipped"}
"""The lecture's stuck setting (lab.experiments.exploration_results.STUCK at init scale 1)."""
CAP, LAG, TARGET = 10, 20, 0.3
"""Dynamic sampling's cap on groups per prompt, the stale runs' lag in optimizer steps, the entropy target (nats)."""
SETTINGS = {
    "plain": STUCK,
    "dynamic": {**STUCK, "dynamic_sampling": True, "max_num_gen_batches": CAP},
    "stale": {**STUCK, "staleness": LAG},
    "stale_truncate": {**STUCK, "staleness": LAG, "importance_sampling_correction": "token-truncate"},
    "stale_mask": {**STUCK, "staleness": LAG, "importance_sampling_correction": "sequence-mask"},
    "frozen": {"delta": "centered", "kl": 0.1, "kl_period": 0, "optimum_metrics": True},
    "synced": {"delta": "centered", "kl": 0.1, "kl_period": 0, "optimum_metrics": True, "sync_ref_model": True,
               "ref_model_mixup_alpha": 0.6, "ref_model_sync_steps": 100},
    "fixed_entropy": {**STUCK, "entropy_coef": 0.03},
    "adaptive_entropy": {**STUCK, "entropy_coef": 0.03, "adaptive_entropy": True, "entropy_target": TARGET},
}
"""Each setting's overrides of the reproduction's base config, by name."""
CORRECTIONS = {"none": (None, None, None), "token-truncate": ("token-truncate", None, 3.0),
               "token-mask": ("token-mask", None, 3.0), "sequence-truncate": ("sequence-truncate", None, 3.0),
               "sequence-mask": ("sequence-mask", None, 3.0), "sequence, unbounded": ("sequence-truncate", None,
                                                                                      math.inf)}
"""The exact table's corrections: (mode, C_min, C_max), TRL's default C_max = 3."""
LAGS, SAMPLER_TEMPERATURES, CLIP_MAXES = (1, 5, 10, 20), (0.8, 0.9, 1.1, 1.25), (1.5, 3.0, 10.0, 100.0)
PATH_STEPS, PATH_LR, AT = 60, 2.0, 40
"""The exact expected-update path: PATH_STEPS steps of PATH_LR x the on-policy update (raw deltas) in the logits
from seed 0's initial policy; the bias is measured at step AT, with the sampler K steps back."""


def sampler_configs(seeds: int, base: TrainConfig) -> tuple[list[TrainConfig], dict[str, list[int]]]:
    """Every run of the section, and each setting's run indices (seed order)."""
    configs, groups = [], {}
    for name, overrides in SETTINGS.items():
        groups[name] = list(range(len(configs), len(configs) + seeds))
        configs += [base.replace(**overrides, seed=seed) for seed in range(seeds)]
    return configs, groups


def initial_logits(seeds: int, base: TrainConfig) -> torch.Tensor:
    """float64[seed batch pos vocab]: each seed's initial per-position logits on the lecture's prompts."""
    task, configs = default_task(), [base.replace(seed=s) for s in range(seeds)]
    kind = Factorized(task, configs, [torch.Generator().manual_seed(s) for s in range(seeds)],
                      RunGroups([c.reward for c in configs], "cpu"), torch.device("cpu"))
    return kind.logits.double()


def rewards_of(base: TrainConfig) -> torch.Tensor:
    task = default_task()
    return reward_table(task.prompts, task.reward_fn(base.reward), task.vocab_size, task.response_length).double()


def initial_cost(seeds: int, base: TrainConfig) -> np.ndarray:
    """float[seed]: S_N summed over the prompts at each seed's initial policy: the first epoch's expected groups."""
    rewards, logits = rewards_of(base), initial_logits(seeds, base)
    costs = []
    for seed in range(seeds):
        token = response_tables(torch.log_softmax(logits[seed], -1))[1]
        probs = token.sum(-1).exp()  # float[batch n]
        q = torch.stack([no_signal_probability(value_probs(p, r)[1], base.group_size) for p, r in zip(probs, rewards)])
        costs.append(expected_draws(q, CAP).sum().item())
    return np.array(costs)


def bias_tables(base: TrainConfig) -> dict:
    """{"stale": {K: {correction: (bias, variance / on-policy variance)}}, "mismatch": {T_s: ...}, "bounds": {C_max:
    (truncate's bias, variance, mask's bias, variance)} at the largest K} at step AT of the exact path (raw deltas,
    lab.exact.sampler_bias)."""
    rewards, z = rewards_of(base), initial_logits(1, base)[0]
    path = [z]
    for _ in range(PATH_STEPS):
        path.append(path[-1] + PATH_LR * sampler_update(torch.log_softmax(path[-1], -1),
                                                        torch.log_softmax(path[-1], -1), rewards).mean)
    log_pi = torch.log_softmax(path[AT], -1)
    on = sampler_update(log_pi, log_pi, rewards)

    def row(log_mu):
        out = {}
        for name, (mode, low, high) in CORRECTIONS.items():
            update = sampler_update(log_pi, log_mu, rewards, mode, low, high)
            out[name] = (relative_bias(update.mean, on.mean).mean().item(),
                         (update.variance.sum() / on.variance.sum()).item())
        return out

    stale = torch.log_softmax(path[AT - max(LAGS)], -1)
    bounds = {}
    for high in CLIP_MAXES:  # the sequence modes at the largest lag, as a function of C_max
        cut = [sampler_update(log_pi, stale, rewards, f"sequence-{mode}", None, high) for mode in ("truncate", "mask")]
        bounds[high] = tuple(x for u in cut for x in (relative_bias(u.mean, on.mean).mean().item(),
                                                      (u.variance.sum() / on.variance.sum()).item()))
    return {"stale": {k: row(torch.log_softmax(path[AT - k], -1)) for k in LAGS},
            "mismatch": {t: row(torch.log_softmax(path[AT] / t, -1)) for t in SAMPLER_TEMPERATURES},
            "bounds": bounds}


def reference_numbers(base: TrainConfig, steps: int = 3000) -> dict:
    """{scheme: (final E[r] / optimum, final KL to pi_0)} of the exact iteration on the lecture's prompts (tabular
    class over every response, seed 0's initial policy, beta 0.1, a = (G - 1) / (G L) of centered deltas, lr 1 per
    step, the settings' mixing: alpha 0.6 every 100 steps; periodic: alpha 1 every 100)."""
    rewards = rewards_of(base)
    token = response_tables(torch.log_softmax(initial_logits(1, base)[0], -1))[1]
    start = token.sum(-1)  # float[batch n]: log pi_0
    scale = (base.group_size - 1) / base.group_size / token.shape[-1]
    best = rewards.max(-1).values
    schemes = {"frozen": {}, "periodic": {"alpha": 1.0, "every": 100}, "synced": {"alpha": 0.6, "every": 100}}
    out = {}
    for name, mixing in schemes.items():
        path = follow_reference(start, rewards, 0.1, steps, 1.0, scale=scale, **mixing)
        out[name] = ((path.expected_reward[-1] / best).mean().item(), path.kl_initial[-1].mean().item())
    return out


EXACT_S = 3.0
"""Seconds of the section's exact numbers (the reference iteration's 3000 steps, most of it), for the progress."""


def samplers_work(seeds: int, base: TrainConfig, sweep_work) -> float:
    """The estimated time of `run_samplers` (`lab.experiments.work`), for a reproduction's progress."""
    return sweep_work(sampler_configs(seeds, base)[0]) + EXACT_S


def run_samplers(seeds: int, base: TrainConfig, run_sweep, device="cpu", progress=None) -> dict:
    """The section's records, groups and exact numbers (module docstring)."""
    configs, groups = sampler_configs(seeds, base)
    records = run_sweep(default_task(), configs, device=device, progress=progress)
    return {"records": records, "groups": groups, "seeds": seeds, "cost": initial_cost(seeds, base),
            "bias": bias_tables(base), "reference": reference_numbers(base)}
