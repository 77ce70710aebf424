"""RESULTS.md's DPO section (lab.experiments.dpo_results) at a tiny size: every setting aims at the same beta', the
distance to pi* it reports is the exact one, and its convergence verdict is a test of growth that can fail."""

import numpy as np
import pytest

from lab.experiments import dpo_results as D
from lab.experiments import verdicts as v
from lab.experiments.sweep import run_sweep
from lab.training.config import TrainConfig
from lab.training.objective import objective
from tasks.sorting import make_task

SEEDS = 3


@pytest.fixture(scope="module")
def section():
    configs, groups = D.dpo_configs(SEEDS, TrainConfig(epochs=3, steps=1))
    return run_sweep(make_task(), configs), groups


def test_every_setting_aims_at_the_same_beta_prime_with_pi_0_frozen(section):
    """GRPO with a KL in the loss runs at beta = BETA (G-1) / (G C) = 0.015 so that its beta' is BETA, as GRPO with
    k1 in the reward and DPO at beta = BETA; every reference is pi_0, frozen (issue 35: the section used to compare
    a KL in the loss at beta' 0.1667 with runs at 0.05). Mutant: `matched_kl` returning BETA fails."""
    records, groups = section
    for runs in groups:
        config = records.configs[runs[0]]
        ascends = objective(config, D.HORIZON)
        assert ascends.beta_prime == pytest.approx(D.BETA, rel=1e-12) and ascends.reference == "pi_0 (frozen)"
    assert records.configs[groups[0][0]].kl == pytest.approx(0.015)


def test_the_derived_distance_to_pi_star_is_the_recorded_one_where_a_run_tracks_the_same_beta(section):
    """GRPO with k1 in the reward records kl_to_optimum at its own beta = BETA; `optimum_distance` derives the same
    number from its exact E[r] and KL to pi_0 and each seed's log Z (claim 26), to float32's rounding of E[r] / beta
    (1e-4). Mutant: log Z at beta' 0.015 instead of BETA fails by nats."""
    records, groups = section
    runs = groups[2]
    derived = D.optimum_distance(records)[runs]
    np.testing.assert_allclose(derived, records.epoch_metrics["kl_to_optimum"][runs], atol=1e-4)


def test_the_plateau_rule_fails_on_growth_and_holds_on_a_flat_kl(section):
    """`plateau_verdict` is `stopped` on each seed's late-window growth: a KL rising by 1 nat per epoch in every seed
    does not hold, a flat one holds (tolerance 10% of the final KL). Mutant: the old +-10%-of-the-level rule on
    interval ends with no test of growth keeps "holds" within the margin and fails the rising case on small KLs."""
    records, groups = section
    runs = groups[3]
    kl = records.step_metrics["kl_exact"]
    original = kl.copy()
    try:
        epochs = D.epoch_kl(records).shape[1]
        kl[runs] = np.repeat(np.arange(epochs, dtype=float) + 0.01 * np.arange(len(runs))[:, None], records.configs[0].steps, axis=1)
        assert D.plateau_verdict(records, runs)[0].answer == v.FAILS
        kl[runs] = 5.0 + 0.001 * np.arange(len(runs))[:, None]
        assert D.plateau_verdict(records, runs)[0].answer == v.HOLDS
    finally:
        kl[...] = original
