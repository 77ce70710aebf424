"""The section 'The lecture's conclusions beyond sorting' (lab/experiments/beyond_sorting.py): its rules can give
every answer, its pairs share seeds, and it re-decides each verdict on every task file.

Rules as claims: a verdict comes from a paired 95% t-interval of a - b over seeds (the lecture's section of RESULTS.md
uses the same intervals); the smallest detectable effect is the paired t-test's minimal detectable difference at 80%
power, (t_{0.975, n-1} + t_{0.80, n-1}) s_d / sqrt(n) (e.g. Cohen 1988, ch. 2). Mutants tried: `reversed` tested as
`high <= 0` (an interval touching 0 from below is then called reversed: the (-0.1, 0.0) case fails), and the
detectable effect without the power term (the value at n = 10, s_d = 1 fails).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lab.experiments.beyond_sorting import (COMPARISONS, MARGIN, SETTINGS, beyond_configs, detectable, ordered_tasks,
                                            paired, run_beyond_sorting, section_lines, verdict)
from lab.experiments.intervals import Interval
from lab.training.config import TrainConfig


@pytest.mark.parametrize("low, high, rule, answer", [
    (0.01, 0.2, "above", "holds"),
    (-0.2, -0.01, "above", "reversed"),
    (-0.1, 0.0, "above", "inconclusive"),
    (-0.01, 0.02, "above", "no difference"),
    (-0.3, 0.3, "above", "inconclusive"),
    (-0.02, 0.03, "equivalent", "holds"),
    (0.06, 0.2, "equivalent", "does not hold"),
    (-0.2, -0.06, "equivalent", "does not hold"),
    (0.01, 0.08, "equivalent", "inconclusive"),
])
def test_each_rule_can_give_each_of_its_answers(low, high, rule, answer):
    """`above 0`: holds, reversed, no difference (inside +-MARGIN) or inconclusive; `within +-MARGIN`: holds, does not
    hold, inconclusive: each reached by some interval."""
    assert MARGIN == 0.05
    assert verdict(Interval((low + high) / 2, low, high, 10), rule) == answer


def test_the_detectable_effect_is_the_paired_t_tests_minimal_difference_at_80_percent_power():
    """n = 10 differences of sample std 1: (t_{0.975, 9} + t_{0.80, 9}) / sqrt(10) = (2.2622 + 0.8834) / 3.1623."""
    diff = np.array([1.0, -1.0] * 5)
    diff = diff / diff.std(ddof=1)
    assert detectable(diff) == pytest.approx((2.262157 + 0.883404) / math.sqrt(10), rel=1e-5)
    assert math.isnan(detectable(np.array([0.3])))


def test_the_settings_of_a_comparison_share_seeds_and_differ_only_where_the_claim_says():
    """Each comparison's two settings are run on seeds 0..n-1 each, under the task's reward, and their configs differ
    only in the fields the claim names (delta; init scale; loss)."""
    seeds, base = 3, TrainConfig(epochs=2, steps=1)
    configs = beyond_configs(seeds, base, "distance")
    names = list(SETTINGS)
    for comparison in COMPARISONS:
        a = configs[names.index(comparison.a) * seeds:][:seeds]
        b = configs[names.index(comparison.b) * seeds:][:seeds]
        assert [c.seed for c in a] == [c.seed for c in b] == list(range(seeds))
        for x, y in zip(a, b):
            differ = {k for k, v in x.to_dict().items() if y.to_dict().get(k) != v}
            assert differ and differ <= {"delta", "loss", "init_scale"} and x.reward == "distance"


def test_the_section_decides_every_verdict_on_every_task_with_the_lectures_first():
    """At tiny sizes (3 seeds, 3 epochs) the section has one row per comparison and task, each with a verdict, a
    paired interval of n = seeds and a detectable effect, and one sentence per claim saying where it holds."""
    seeds = 3
    results = run_beyond_sorting(seeds, TrainConfig(epochs=3, steps=2), "cpu")
    assert list(results) == list(ordered_tasks()) and ordered_tasks()[0] == "sorting"
    assert {"reverse", "permutation"} <= set(results)
    lines = section_lines(results, seeds)
    rows = [line for line in lines if line.startswith("| ") and "**" in line]
    assert len(rows) == len(COMPARISONS) * len(results)
    for name, records in results.items():
        assert records.configs[0].reward == {"sorting": "inclusion-ordering", "reverse": "exact-match",
                                             "permutation": "rearranged"}.get(name, records.configs[0].reward)
        for comparison in COMPARISONS:
            diff, _ = paired(records, comparison, seeds)
            assert diff.n == seeds
    assert sum(line.startswith("- ") for line in lines) == len(COMPARISONS)
