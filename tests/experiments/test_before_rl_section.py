"""RESULTS.md's "Before RL" section (lab.experiments.before_rl_results) built from small runs: its numbers come from
the records, every verdict is a verdict rule's answer (tests/experiments/test_verdicts.py shows each can be
reached), and the starts and references are each seed's own."""

import numpy as np
import pytest

from lab.experiments import before_rl_results as B
from lab.experiments import verdicts as v
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
    assert len(verdicts(lines)) == 9 and set(verdicts(lines)) <= set(v.ANSWERS)


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


def test_each_seed_starts_from_its_own_sft_policy(section):
    """Seed s's SFT-start runs load seed s's SFT policy (issue 35: one start shared by all seeds made 20 runs one
    start's). Mutant: every seed from seed 0's start fails."""
    records, groups = section
    starts = [records.configs[r].init_from for r in groups[B.INDEX["GRPO + KL, SFT start"]]]
    assert len(set(starts)) == SEEDS and all(start.endswith(f"seed{s}") for s, start in enumerate(starts))


def test_the_verdicts_are_the_rules_on_the_paired_records(section):
    """The first verdict is `above` on GRPO minus SFT (noisy) final E[r], paired by seed, effect of interest REACH;
    the third the non-inferiority form (margin = refute = -REACH)."""
    records, groups = section
    reward = records.epoch_metrics["reward_exact"][:, -1]
    at = lambda label: reward[groups[B.INDEX[label]]]  # noqa: E731
    lines = B.before_rl_markdown(records, groups, SEEDS)
    assert verdicts(lines)[0] == v.above(at("GRPO"), at("SFT, noisy demonstrations"), effect=B.REACH).answer
    assert verdicts(lines)[2] == v.above(at("expert iteration"), at("GRPO"), margin=-B.REACH, refute=-B.REACH,
                                         effect=B.REACH).answer


def test_the_figure_is_drawn(section, tmp_path):
    records, groups = section
    path = B.plot_before_rl(records, groups, tmp_path / "before_rl.png", "small")
    assert path.stat().st_size > 10_000  # two panels of curves, not an empty canvas
