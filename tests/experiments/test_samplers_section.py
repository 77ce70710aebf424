"""RESULTS.md's samplers section (issue 38; lab.experiments.sampler_results, sampler_section) at a tiny size, and
its rules shown able to give each answer."""

import math

import numpy as np

from lab.experiments.intervals import paired_interval
from lab.experiments.reproduce import LECTURE
from lab.experiments.sampler_results import SETTINGS, run_samplers
from lab.experiments.sampler_section import claim_row, detectable, section_lines, trade_word
from lab.experiments.sweep import run_sweep


def test_the_section_decides_its_four_claims_from_paired_runs(tmp_path):
    """Two seeds, 3 epochs x 2 steps: every setting's runs share seeds 0, 1; the section has the four claims'
    rows, each with a verdict of the rule's words, and its numbers come from the records (the first epoch's drawn
    groups beside the exact expected cost)."""
    result = run_samplers(2, LECTURE.replace(epochs=3, steps=2), run_sweep)
    records, groups = result["records"], result["groups"]
    assert set(groups) == set(SETTINGS)
    for runs in groups.values():
        assert [records.configs[r].seed for r in runs] == [0, 1]
    text = "\n".join(section_lines(result))
    rows = [line for line in text.splitlines() if line.endswith("** |")]
    assert len(rows) == 4
    assert {row.rsplit("**", 2)[-2] for row in rows} <= {"holds", "does not hold", "inconclusive", "partly"}
    drawn = records.epoch_metrics["groups_drawn"][groups["dynamic"], 0].mean()
    assert f"{drawn:.2f} drawn" in text and f"{result['cost'].mean():.2f} groups" in text


def test_each_rule_can_give_each_answer():
    """claim_row: an interval above 0 holds, one whose top is below the margin does not hold, one straddling 0
    with a top above the margin is inconclusive; trade_word names all four orders of (bias, variance)."""
    assert claim_row("c", "e", 0.1, 0.3, 0.1).endswith("**holds** |")
    assert claim_row("c", "e", -0.2, 0.05, 0.1).endswith("**does not hold** |")
    assert claim_row("c", "e", -0.2, 0.3, 0.1).endswith("**inconclusive** |")
    words = {trade_word(mask, (1.0, 1.0)) for mask in ((2.0, 0.5), (0.5, 0.5), (2.0, 2.0), (0.5, 2.0))}
    assert words == {"trades bias for variance", "dominates", "is dominated", "has less bias and more variance"}


def test_the_detectable_effect_is_the_80_percent_power_paired_difference():
    """MDE = (t_0.975 + t_0.8) s_d / sqrt(n): with n = 10 and s_d = 1, about (2.262 + 0.883) / 3.162 = 0.995; and
    larger than the paired interval's half-width (mutant: the half-width alone)."""
    a = np.array([1.0, -1.0] * 5) * math.sqrt(0.9) + 0.3
    b = np.zeros(10)
    assert abs(detectable(a, b) - (2.2622 + 0.8834) / math.sqrt(10)) < 1e-3
    interval = paired_interval(a, b)
    assert detectable(a, b) > (interval.high - interval.low) / 2
