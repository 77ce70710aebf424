"""Planted effects for the verdict rules' tests: paired samples whose per-seed differences have an exact mean and
std, on top of a seed-to-seed variation both arms share (which pairing removes, as it does between the lab's runs
that share a seed)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

SHARED_SPREAD = 5.0
"""std of what both arms of a seed share: far larger than the effects, so an unpaired rule would see nothing"""


def planted(n: int, effect: float, spread: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) float[run] with a - b of mean exactly `effect` and std (Bessel) exactly `spread`."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    z = (z - z.mean()) / z.std(ddof=1)
    base = 3.0 + SHARED_SPREAD * rng.standard_normal(n)
    return base + effect + spread * z, base


def spread_for(n: int, per_seed_error: float) -> float:
    """The std of the differences whose standard error over n seeds is `per_seed_error`."""
    return per_seed_error * math.sqrt(n)


def half_width(n: int, spread: float) -> float:
    """The paired t-interval's half-width at n seeds and this std of the differences."""
    return float(stats.t.ppf(0.975, n - 1)) * spread / math.sqrt(n)
