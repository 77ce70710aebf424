"""lab.experiments.intervals: each interval against its formula written out by hand."""

import math

import numpy as np
import pytest

from lab.experiments.intervals import (difference_interval, mean_interval, paired_interval, paired_p_value,
                                       probability_interval, t_quantile, wilson_interval)


def test_paired_interval_is_the_t_interval_of_the_per_seed_differences():
    a = np.array([3.1, 2.9, 3.6, 3.3, 3.0, 2.7])
    b = a - np.array([0.2, 0.5, 0.1, 0.4, 0.3, 0.35])
    d = a - b
    half = t_quantile(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    paired = paired_interval(a, b)
    assert (paired.estimate, paired.low, paired.high) == pytest.approx((d.mean(), d.mean() - half, d.mean() + half))
    assert paired.high - paired.low < difference_interval(a, b).high - difference_interval(a, b).low  # pairing helps


def test_paired_interval_drops_pairs_with_a_missing_side_and_the_p_value_matches_the_t_statistic():
    a, b = np.array([1.0, 2.0, np.nan, 4.0, 3.0]), np.array([0.5, 1.0, 2.0, np.nan, 2.2])
    assert paired_interval(a, b).n == 3
    d = np.array([0.5, 1.0, 0.8])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(3))
    from scipy import stats

    assert paired_p_value(a, b) == pytest.approx(2 * stats.t.sf(t, 2))


def test_probability_interval_stays_in_the_unit_interval_where_the_t_interval_does_not():
    skewed = np.array([0.185] + [1e-5] * 19)  # one seed carries the mean, as initial optimal_prob at scale 1
    assert mean_interval(skewed).low < 0
    boot = probability_interval(skewed)
    assert 0 <= boot.low <= boot.estimate <= boot.high <= 1
    assert boot.low == pytest.approx(1e-5)  # a resample without the outlier: the lowest possible mean
    assert probability_interval(skewed) == boot  # the default generator makes it reproducible


def test_welch_and_wilson_match_their_formulas():
    a, b = np.array([1.0, 2.0, 4.0, 3.5]), np.array([0.5, 0.9, 1.1, 0.2, 0.7])
    va, vb = a.var(ddof=1) / 4, b.var(ddof=1) / 5
    df = math.floor((va + vb) ** 2 / (va**2 / 3 + vb**2 / 4))
    half = t_quantile(0.975, df) * math.sqrt(va + vb)
    welch = difference_interval(a, b)
    assert (welch.low, welch.high) == pytest.approx((a.mean() - b.mean() - half, a.mean() - b.mean() + half))
    z, p, n = 1.959963984540054, 7 / 20, 20
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z / (1 + z**2 / n) * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    assert (wilson_interval(7, 20).low, wilson_interval(7, 20).high) == pytest.approx((centre - half, centre + half))
