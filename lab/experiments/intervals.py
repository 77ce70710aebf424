"""95% intervals over seeds, from `scipy.stats`: which interval for which quantity.

    mean:        m +- t_{1 - a/2, n - 1} s / sqrt(n)                 Student t (s: Bessel-corrected std)
    difference:  Welch t: mean(a) - mean(b) +- t_{1 - a/2, df} se     independent seeds (df rounded down)
    paired:      mean(a_i - b_i) +- t_{1 - a/2, n - 1} s_d / sqrt(n)  runs paired by seed (scipy.stats.ttest_rel)
    seed_difference: the paired interval where two settings ran the same seeds, Welch's where they share none
    fraction:    Wilson score interval (scipy.stats.binomtest(...).proportion_ci(method="wilson"))
    probability: percentile bootstrap of the mean over seeds (scipy.stats.bootstrap, BOOTSTRAP_RESAMPLES
                 resamples, a numpy Generator seeded with BOOTSTRAP_SEED unless one is given)

The t-intervals assume roughly normal seed-to-seed scatter of the mean. A mean of probabilities
that are skewed (most seeds near 0, one near 0.2) breaks that: its t-interval reaches below 0.
The percentile bootstrap's ends are means of resampled seeds, so they stay inside [min, max] of
the values and hence inside [0, 1]; the Wilson interval stays inside [0, 1] and is sensible at
0 or n successes, where the normal-approximation interval collapses to a point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95
"""The confidence level of every interval the lab reports."""
BOOTSTRAP_RESAMPLES = 9999
"""Resamples of the percentile bootstrap of `probability_interval`."""
BOOTSTRAP_SEED = 0
"""Seed of the numpy Generator the bootstrap draws from when the caller gives none (a local generator)."""


@dataclass(frozen=True)
class Interval:
    """An estimate with its interval: `low <= estimate <= high`; n = number of seeds."""

    estimate: float
    low: float
    high: float
    n: int

    def excludes(self, value: float) -> bool:
        return value < self.low or value > self.high

    def text(self, digits: int = 3) -> str:
        """`3.00 [2.50, 3.50]`; `3.00 [n/a]` where there is no interval (a t-interval of one seed)."""
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return f"{self.estimate:.{digits}f} [n/a]"
        return f"{self.estimate:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with df degrees of freedom (scipy.stats.t.ppf)."""
    return float(stats.t.ppf(p, df))


def mean_interval(values, level: float = LEVEL) -> Interval:
    """Student-t interval for the mean of `values` (one per seed); undefined (NaN bounds) when n = 1:
    one seed says nothing about the spread, so no interval is shown rather than a point. A point when
    every value is equal."""
    values = np.asarray(values, dtype=float)
    n, mean = len(values), float(values.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    if float(values.std(ddof=1)) == 0:
        return Interval(mean, mean, mean, n)
    half = t_quantile(1 - (1 - level) / 2, n - 1) * float(values.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def paired_interval(a, b, level: float = LEVEL) -> Interval:
    """Paired t-interval for mean(a_i - b_i), a_i and b_i from the same seed (scipy.stats.ttest_rel).

    n = number of pairs. Pairs with a NaN on either side are dropped."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    diff = a - b
    if len(diff) < 2 or float(diff.std(ddof=1)) == 0:
        value = float(diff.mean()) if len(diff) else float("nan")
        return Interval(value, value, value, len(diff))
    ci = stats.ttest_rel(a, b).confidence_interval(level)
    return Interval(float(diff.mean()), float(ci.low), float(ci.high), len(diff))


def paired_p_value(a, b) -> float:
    """Two-sided p-value of the paired t-test of mean(a_i - b_i) = 0 (NaN pairs dropped)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    keep = ~(np.isnan(a) | np.isnan(b))
    return float(stats.ttest_rel(a[keep], b[keep]).pvalue)


def probability_interval(values, level: float = LEVEL, rng: np.random.Generator | None = None) -> Interval:
    """Percentile bootstrap interval for the mean over seeds of probabilities in [0, 1]: stays in [0, 1].

    The ends are quantiles of the means of `BOOTSTRAP_RESAMPLES` resamples of the seeds (with
    replacement), drawn from `rng` (default: a new Generator seeded with BOOTSTRAP_SEED)."""
    values = np.asarray(values, dtype=float)
    n, mean = len(values), float(values.mean())
    if n < 2 or float(values.max() - values.min()) == 0:
        return Interval(mean, mean, mean, n)
    rng = np.random.default_rng(BOOTSTRAP_SEED) if rng is None else rng
    result = stats.bootstrap((values,), np.mean, confidence_level=level, n_resamples=BOOTSTRAP_RESAMPLES,
                             method="percentile", random_state=rng, vectorized=True)
    low, high = result.confidence_interval
    return Interval(mean, float(low), float(high), n)


def median_quartiles(values) -> Interval:
    """The median over seeds with the 25% and 75% quantiles as low and high.

    Not a confidence interval: the spread of a positive, heavily skewed quantity (a KL across
    seeds, many runs exactly 0 once their groups stop varying), for which a t-interval of the
    mean reaches below zero.
    """
    values = np.asarray(values, dtype=float)
    low, median, high = np.quantile(values, [0.25, 0.5, 0.75])
    return Interval(float(median), float(low), float(high), len(values))


def wilson_interval(successes: int, n: int, level: float = LEVEL) -> Interval:
    """Wilson score interval for a fraction successes / n (scipy.stats.binomtest)."""
    ci = stats.binomtest(int(successes), int(n)).proportion_ci(level, method="wilson")
    return Interval(successes / n, max(0.0, float(ci.low)), min(1.0, float(ci.high)), n)


def seed_difference(a, b, seeds_a, seeds_b, level: float = LEVEL) -> Interval:
    """mean(a) - mean(b) for two settings' runs, value per run, with each run's seed: the paired t-interval,
    runs matched by seed, where the two settings ran the same seeds (a sweep's seeds 0..N-1 are shared by
    every setting, so their runs are not independent); Welch's where they share none. Every verdict rule
    of lab/experiments compares settings through this (tests/experiments/test_intervals.py checks it)."""
    seeds_a, seeds_b = [int(s) for s in seeds_a], [int(s) for s in seeds_b]
    if len(set(seeds_a)) < len(seeds_a) or len(set(seeds_b)) < len(seeds_b):
        raise ValueError("each setting's runs must have distinct seeds to be compared")
    shared = set(seeds_a) & set(seeds_b)
    if not shared:
        return difference_interval(a, b, level)
    if set(seeds_a) != set(seeds_b):
        raise ValueError(f"the settings share some seeds but not all ({len(shared)} of {len(seeds_a)} and "
                         f"{len(seeds_b)}): neither paired nor independent")
    order_a, order_b = np.argsort(seeds_a), np.argsort(seeds_b)
    return paired_interval(np.asarray(a, dtype=float)[order_a], np.asarray(b, dtype=float)[order_b], level)


def difference_interval(a, b, level: float = LEVEL) -> Interval:
    """Welch t-interval for mean(a) - mean(b) (independent seeds, unequal variances; df rounded down)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff = float(a.mean() - b.mean())
    se = math.sqrt(va + vb)
    if se == 0:
        return Interval(diff, diff, diff, len(a) + len(b))
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile(1 - (1 - level) / 2, max(1, math.floor(df))) * se
    return Interval(diff, diff - half, diff + half, len(a) + len(b))
