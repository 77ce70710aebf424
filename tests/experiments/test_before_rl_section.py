"""RESULTS.md's "Before RL" section (lab.experiments.before_rl_results) built from small runs: its numbers come from
the records, every verdict is one of the three words, and each rule can go either way."""

import numpy as np
import pytest

from lab.experiments import before_rl_results as B
from lab.experiments.sweep import run_sweep
from lab.training.config import TrainConfig
from tasks.sorting import make_task

SEEDS = 3


@pytest.fixture(scope="module")
def section():
    records, groups = B.run_before_rl(SEEDS, TrainConfig(epochs=3, steps=2), run_sweep, make_task(), "cpu")
    return records, groups


def verdicts(lines: list[str]) -> list[str]:
    return [line.rsplit("**", 2)[-2] for line in lines if line.endswith("** |")]


def test_the_section_has_a_row_per_setting_and_a_verdict_per_rule(section):
    records, groups = section
    lines = B.before_rl_markdown(records, groups, SEEDS)
    for label, _ in B.SETTINGS:
        assert any(line.startswith(f"| {label} | ") for line in lines), label
    assert len(verdicts(lines)) == 7 and set(verdicts(lines)) <= {"holds", "does not hold", "inconclusive"}


def test_the_rows_numbers_are_the_records(section):
    records, groups = section
    lines = B.before_rl_markdown(records, groups, SEEDS)
    runs = groups[B.INDEX["GRPO"]]
    row = next(line for line in lines if line.startswith("| GRPO | "))
    assert row.split(" | ")[1].startswith(f"{records.epoch_metrics['reward_exact'][runs, -1].mean():.2f} [")
    start = records.configs[groups[B.INDEX["DPO, SFT start"]][0]]
    assert start.init_from is not None and start.loss.value == "dpo"
    # the SFT start is the reference: KL 0 to it at the first step, for every seed
    np.testing.assert_array_equal(records.step_metrics["kl_exact"][groups[B.INDEX["DPO, SFT start"]], 0], 0.0)
    np.testing.assert_array_equal(records.step_metrics["kl_exact"][groups[B.INDEX["GRPO + KL, SFT start"]], 0], 0.0)


def test_each_rule_can_fail(section):
    """The first rule's verdict is the sign of the paired interval; swapping what it compares mirrors it (holds <->
    does not hold), so the rule decides rather than always holding."""
    records, groups = section
    i, j = B.INDEX["GRPO"], B.INDEX["SFT, noisy demonstrations"]
    reward = records.epoch_metrics["reward_exact"][:, -1]
    interval = B.mean_interval(reward[groups[i]] - reward[groups[j]])
    expected = "holds" if interval.low > 0 else "does not hold" if interval.high < 0 else "inconclusive"
    assert verdicts(B.before_rl_markdown(records, groups, SEEDS))[0] == expected
    swapped = list(groups)
    swapped[i], swapped[j] = groups[j], groups[i]
    mirror = {"holds": "does not hold", "does not hold": "holds", "inconclusive": "inconclusive"}
    assert verdicts(B.before_rl_markdown(records, swapped, SEEDS))[0] == mirror[expected]


def test_the_figure_is_drawn(section, tmp_path):
    records, groups = section
    path = B.plot_before_rl(records, groups, tmp_path / "before_rl.png", "small")
    assert path.stat().st_size > 10_000  # two panels of curves, not an empty canvas
