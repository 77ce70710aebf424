"""lab.experiments.intervals: each interval against its formula written out by hand."""

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from lab.experiments.intervals import (difference_interval, mean_interval, paired_interval, paired_p_value,
                                       probability_interval, seed_difference, t_quantile, wilson_interval)


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


def test_seed_difference_pairs_runs_by_seed_where_settings_share_seeds():
    """Two settings that ran the same seeds (in any order) get the paired t-interval, runs matched by seed; two
    that share none get Welch's; a partial overlap is refused. Mutant: matching by position instead of by seed
    gives another interval when the seeds come in another order."""
    rng = np.random.default_rng(3)
    a = rng.normal(size=8)
    b = a + 0.1 + 0.01 * rng.normal(size=8)  # strongly paired: the seed explains most of the scatter
    order = rng.permutation(8)
    paired = seed_difference(b[order], a, order, range(8))
    assert paired == paired_interval(b, a)
    assert paired.high - paired.low < (difference_interval(b, a).high - difference_interval(b, a).low) / 10
    assert paired != paired_interval(b[order], a)
    assert seed_difference(b, a, range(8), range(8, 16)) == difference_interval(b, a)
    with pytest.raises(ValueError, match="share some seeds but not all"):
        seed_difference(b, a, range(8), range(4, 12))


def unpaired_calls(source: str) -> list[str]:
    """Calls of an unpaired two-sample interval or test in a module's source: `difference_interval` (Welch) or
    scipy's `ttest_ind`."""
    return [ast.unparse(node.func) for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and ast.unparse(node.func).rsplit(".", 1)[-1] in ("difference_interval", "ttest_ind")]


def test_no_verdict_rule_compares_seed_sharing_settings_with_an_unpaired_interval():
    """Every setting of `lab reproduce` runs seeds 0..N-1, so any two settings share their seeds: a verdict rule in
    lab/experiments compares them through `seed_difference` (paired by seed), never Welch's interval directly.
    Mutant: a rule that calls difference_interval is found."""
    folder = Path(__file__).resolve().parents[2] / "lab" / "experiments"
    found = {path.name: unpaired_calls(path.read_text()) for path in folder.glob("*.py") if path.name != "intervals.py"}
    assert {name: calls for name, calls in found.items() if calls} == {}
    assert unpaired_calls("gap = difference_interval(a, b)\nstats.ttest_ind(a, b)") == [
        "difference_interval", "stats.ttest_ind"]
