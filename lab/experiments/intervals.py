"""95% intervals over seeds: Student's t for a mean, Wilson for a fraction.

    mean:      m +- t_{1 - a/2, n - 1} * s / sqrt(n)          (s: Bessel-corrected sample std)
    fraction:  (p + z^2 / 2n  +-  z * sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 / n),  z = z_{1 - a/2}

The t-interval assumes roughly normal seed-to-seed scatter of the mean; the
Wilson score interval stays inside [0, 1] and is sensible at 0 or n successes,
where the normal-approximation interval collapses to a point. Standard library
only: the t quantile is found by bisection on the t CDF, integrated numerically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

LEVEL = 0.95
"""The confidence level of every interval the lab reports."""

_SIMPSON_INTERVALS = 2000  # enough for 1e-8 accuracy of the t CDF on the quantiles used here


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


def _t_cdf(x: float, df: int) -> float:
    """P(T <= x) for x >= 0: 1/2 + integral_0^x of the t density (Simpson's rule)."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    grid = np.linspace(0.0, x, _SIMPSON_INTERVALS + 1)
    density = np.exp(log_norm - (df + 1) / 2 * np.log1p(grid**2 / df))
    weights = np.ones_like(grid)
    weights[1:-1:2], weights[2:-1:2] = 4, 2
    return 0.5 + float((weights * density).sum()) * (x / _SIMPSON_INTERVALS) / 3


def t_quantile(p: float, df: int) -> float:
    """The p-quantile (p > 1/2) of Student's t with df degrees of freedom."""
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < p:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def mean_interval(values, level: float = LEVEL) -> Interval:
    """Student-t interval for the mean of `values` (one per seed); undefined (NaN bounds) when n = 1:
    one seed says nothing about the spread, so no interval is shown rather than a point."""
    values = np.asarray(values, dtype=float)
    n, mean = len(values), float(values.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    half = t_quantile(1 - (1 - level) / 2, n - 1) * float(values.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


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
    """Wilson score interval for a fraction successes / n."""
    z = NormalDist().inv_cdf(1 - (1 - level) / 2)
    p = successes / n
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z / (1 + z**2 / n) * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n)


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
