"""What the exploration section's figures and RESULTS.md rows need, computed once from a reproduction's records.

    initial quantities (entropy, P(optimal), P(a group holds the target)) per centered clipped run at each init scale
    pass@k and maj@k before and after training, exactly (`lab.exact.voting`); which runs end solved
    the fit R = -a exp(H) + b of reward against entropy over training

The exploration experiment runs on the lecture's task (`tasks.catalog.default_task`): its init scales, deltas and
losses are `lab.experiments.exploration_results`'s.
"""

from __future__ import annotations

import numpy as np

from lab.experiments import exploration_checks as checks
from lab.experiments import exploration_results as xr
from lab.experiments.sweep import final_endings
from tasks.catalog import default_task


def exploration_analysis(reproduction, experiment, ks: tuple[int, ...] | None = None) -> dict:
    """What the exploration figures and RESULTS.md section need, computed once from the records
    (pass@k and maj@k for k = 1..64, `lab.experiments.exploration_results.KS`, unless `ks` = 1..K is given)."""
    records, prompts = reproduction.records, default_task().prompts
    settings = list(experiment.settings)
    runs = {xr._key(s): reproduction.runs[experiment.name, i] for i, s in enumerate(settings)}
    grid = [s for s in settings if "entropy_coef" not in s]
    reward = records.configs[0].reward
    by_scale = {scale: runs[xr._key({"init_scale": scale, "delta": "centered", "loss": "clipped"})]
                for scale in xr.INIT_SCALES}
    fit_settings = [{"init_scale": scale, "delta": "centered", "loss": "clipped"} for scale in xr.INIT_SCALES]
    centered_clipped = [r for scale in xr.INIT_SCALES for r in by_scale[scale]]
    entropy = xr.sampling_entropy(records)
    hit = {scale: xr.initial_group_hit(records, r, prompts, reward) for scale, r in by_scale.items()}
    at_k_settings = [("stuck", xr._key(xr.STUCK)), ("exploring", xr._key(xr.EXPLORING))]
    naive = runs[xr._key({**xr.EXPLORING, "loss": "naive"})]
    clipped = runs[xr._key(xr.EXPLORING)]
    solved = xr.optimal_everywhere(records)
    return dict(
        centered_clipped=centered_clipped,
        initial_quantities={"initial entropy": entropy[centered_clipped, 0],
                            "initial optimal_prob": records.epoch_metrics["optimal_prob"][centered_clipped, 0],
                            "initial P(a group contains the sorted response)":
                                np.concatenate([hit[scale] for scale in xr.INIT_SCALES])},
        at_k_settings=at_k_settings,
        p_opt={key: checks.optimal_probs(records, runs[key], prompts, reward, xr.initial_policy)
               for _, key in at_k_settings},
        solved={key: ~final_endings(records, runs[key]).stuck for _, key in at_k_settings},
        fit_quality={xr._key(s): checks.fit_quality(entropy[runs[xr._key(s)]],
                                                    records.epoch_metrics["mean_reward"][runs[xr._key(s)]])
                     for s in fit_settings},
        loss_share={"naive_success": solved[naive], "clipped_success": solved[clipped],
                    "naive_entropy": entropy[naive, min(checks.EARLY_EPOCH, entropy.shape[1] - 1)],
                    "clipped_entropy": entropy[clipped, min(checks.EARLY_EPOCH, entropy.shape[1] - 1)]},
        records=records, seeds=reproduction.seeds, runs=runs, grid=grid,
        bonus=[s for s in settings if "entropy_coef" in s],
        initial_hit=hit, lr_control=reproduction.lr_control or {},
        ks=ks or xr.KS,
        at_k={xr._key(s): xr.at_k_curves(records, runs[xr._key(s)], prompts, reward, ks or xr.KS)
              for s in (xr.STUCK, xr.EXPLORING)},
        fit_settings=fit_settings,
        fits={xr._key(s): xr.entropy_reward_fit(records, runs[xr._key(s)]) for s in fit_settings},
    )
