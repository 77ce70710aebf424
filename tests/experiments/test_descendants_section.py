"""RESULTS.md's section on GRPO's descendants (lab/experiments/descendants_results.py, issue 37), at tiny sizes: its
runs are paired by seed, its tables carry every setting and claim, and each verdict rule can give each answer."""

import math

import numpy as np
import pytest
import torch

from lab.experiments.descendants_results import (MARGIN, SETTINGS, detectable, equivalence_rule, run_descendants,
                                                 section_lines, sign_rule)
from lab.experiments.intervals import Interval
from lab.experiments.sweep import run_sweep
from lab.training.config import TrainConfig
from tasks.sorting import make_task


@pytest.fixture(scope="module")
def section():
    torch.set_num_threads(1)
    return run_descendants(2, TrainConfig(epochs=2, steps=2), run_sweep, make_task(), "cpu")


def test_the_section_pairs_every_setting_by_seed_and_states_each_claim(section):
    """Every setting trains seeds 0..N-1 (the pairs of the verdicts) with its own loss settings; the section shows
    the lens row, the trained row and the six claims with a verdict each."""
    records, groups = section["records"], section["groups"]
    for (label, overrides), runs in zip(SETTINGS, groups):
        assert [records.configs[r].seed for r in runs] == [0, 1]
        for name, value in overrides.items():
            assert getattr(records.configs[runs[0]], name) == value or \
                getattr(records.configs[runs[0]], name).value == value
    text = "\n".join(section_lines(section, 2))
    for label, _ in SETTINGS:
        assert text.count(f"| {label} |") == 2  # its lens row and its trained row
    verdicts = [line for line in text.splitlines() if line.endswith("** |")]
    assert len(verdicts) == 6
    assert all(any(v in line for v in ("**holds**", "**does not hold**", "**inconclusive**")) for line in verdicts)


def test_the_lens_rows_read_each_settings_own_loss(section):
    """The lens runs each setting's loss as the training loop reads it: CISPO's filled cap (5) leaves it the
    on-policy gradient's whole share after the lens's steps, where the lecture's clip (0.01) keeps little."""
    rows = {row.name: row for row in section["lens"]}
    assert rows["CISPO (eps_max 5)"].kept > 0.9 > 0.5 > rows["PPO's clip (eps 0.01)"].kept


def test_each_rule_gives_each_answer():
    """sign_rule: above 0 holds, never above 0 does not hold, straddling 0 inconclusive; equivalence_rule: inside
    +-MARGIN holds, wholly outside does not hold, straddling its edge inconclusive."""
    at = lambda low, high: Interval((low + high) / 2, low, high, 20)  # noqa: E731
    assert [sign_rule(at(0.1, 0.3)), sign_rule(at(-0.3, -0.1)), sign_rule(at(0.0, 0.0)), sign_rule(at(-0.1, 0.2))] \
        == ["holds", "does not hold", "does not hold", "inconclusive"]
    m = MARGIN
    assert [equivalence_rule(at(-m / 2, m / 2)), equivalence_rule(at(1.5 * m, 2 * m)),
            equivalence_rule(at(-3 * m, -2 * m)), equivalence_rule(at(0, 2 * m))] \
        == ["holds", "does not hold", "does not hold", "inconclusive"]


def test_the_smallest_detectable_effect_is_the_paired_power_formula():
    """(t_0.975,n-1 + t_0.8,n-1) s_d / sqrt(n): differences 1, 2, 3 (s_d 1, n 3) give (4.303 + 1.061) / sqrt(3);
    no spread gives n/a (NaN). Mutant: the z quantiles (1.96 + 0.84) give 1.617 and fail."""
    value = detectable(np.array([1.0, 2.0, 3.0]), np.zeros(3))
    assert value == pytest.approx((4.302653 + 1.060660) / math.sqrt(3), rel=1e-5)
    assert value != pytest.approx(2.8 / math.sqrt(3), rel=1e-2)
    assert math.isnan(detectable(np.ones(4), np.ones(4)))
