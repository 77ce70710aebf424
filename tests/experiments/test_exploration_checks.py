"""lab.experiments.exploration_checks: each statistic on made-up numbers where the answer is known."""

import numpy as np
import pytest

from lab.experiments.exploration_checks import (auc, crossing, discriminates, fit_quality, optimal_probs, pass_at_k)
from lab.experiments.exploration_results import at_k_curves, initial_policy
from lab.experiments.sweep import run_sweep
from lab.training.config import TrainConfig
from tasks.sorting import make_task


def test_auc_is_the_share_of_ordered_pairs():
    values = np.array([0.1, 0.2, 0.3, 0.9, 1.0, 0.25])
    success = np.array([False, False, False, True, True, True])
    area, p = auc(values, success)
    assert area == pytest.approx(8 / 9)  # 0.25 beats 0.1 and 0.2 but not 0.3
    assert not discriminates(area, p)  # three against three cannot reach p < 0.05
    assert np.isnan(auc(values, np.ones(6, bool))[0])


def test_pass_at_k_and_the_crossing():
    assert pass_at_k(np.array([0.5]), [1, 2, 3])[0].tolist() == pytest.approx([0.5, 0.75, 0.875])
    assert pass_at_k(np.array([1e-9]), [10**5])[0, 0] == pytest.approx(1e-4, rel=1e-3)
    before = np.array([[0.01, 0.01]])  # one seed, two prompts: spread
    after = np.array([[0.5, 0.0]])  # one prompt solved, the other lost
    k = crossing(before, after, [1, 2, 10, 100, 1000])
    assert k == 100  # mean pass@100: before 0.634 > after 0.5; at 10: 0.096 < 0.5
    assert crossing(after, after) is None


def test_fit_quality_tells_exp_from_a_line_on_curved_data():
    h = np.tile(np.linspace(0.0, 2.0, 30), (5, 1))
    reward = -0.5 * np.exp(h) + 5 + 0.001 * np.arange(5)[:, None]
    fits = fit_quality(h, reward)
    assert fits.exp_mean_curve == pytest.approx(1.0) and fits.a_mean_curve == pytest.approx(0.5)
    assert fits.linear_mean_curve < 0.97
    assert fits.exp_wins()[0] == 5


def test_optimal_probs_agree_with_the_pass_at_1_curves():
    task = make_task()
    configs = [TrainConfig(epochs=2, steps=2, seed=s, init_scale=0.3) for s in range(2)]
    records = run_sweep(task, configs)
    before, after = optimal_probs(records, [0, 1], task.prompts, "inclusion-ordering", initial_policy)
    curves = at_k_curves(records, [0, 1], task.prompts, "inclusion-ordering", (1,))
    np.testing.assert_allclose(before.mean(1), curves["pass_before"][:, 0])
    np.testing.assert_allclose(after.mean(1), curves["pass_after"][:, 0])


def test_the_auc_reach_is_where_the_mann_whitney_test_finds_a_shifted_class_four_times_in_five():
    """With 40 sorting and 40 stuck seeds, normal scores shifted so that the true AUC is 1/2 + auc_reach(40, 40), the
    two-sided Mann-Whitney test at 5% rejects in about 80% of 1000 simulated designs (fixed seed; tolerance 0.05,
    the normal approximation's error included). Mutant: se without the 12 (a variance 12 times too large) fails."""
    from scipy import stats

    from lab.experiments.exploration_checks import auc_reach

    reach = auc_reach(40, 40)
    shift = np.sqrt(2) * stats.norm.ppf(0.5 + reach)  # AUC of N(shift, 1) against N(0, 1) is Phi(shift / sqrt 2)
    rng = np.random.default_rng(11)
    rejected = [stats.mannwhitneyu(rng.standard_normal(40) + shift, rng.standard_normal(40)).pvalue < 0.05
                for _ in range(1000)]
    assert abs(np.mean(rejected) - 0.8) < 0.05
