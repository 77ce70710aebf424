"""RESULTS.md's samplers section (issue 38; lab.experiments.sampler_results, sampler_section) at a tiny size, and
its rules shown able to give each answer."""

from lab.experiments.reproduce import LECTURE
from lab.experiments.sampler_results import SETTINGS, run_samplers
from lab.experiments.sampler_section import both, section_lines, stale_answer, trade_word
from lab.experiments.verdicts import ANSWERS, above
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
    assert {row.rsplit("**", 2)[-2] for row in rows} <= set(ANSWERS)
    drawn = records.epoch_metrics["groups_drawn"][groups["dynamic"], 0].mean()
    assert f"{drawn:.2f} drawn" in text and f"{result['cost'].mean():.2f} groups" in text


def test_each_rule_can_give_each_answer():
    """The exact rule for the stale claim reaches holds, partly and does not hold; trade_word names all four orders
    of (bias, variance); `both` combines two verdicts into each answer (the trained rules themselves are
    lab.experiments.verdicts', tests/experiments/test_verdicts.py)."""
    assert stale_answer({5: 0.9, 10: 0.8}, {5: True, 10: True}) == "holds"
    assert stale_answer({5: 0.9, 10: 0.8}, {5: False, 10: True}) == "partly"
    assert stale_answer({5: 0.4, 10: 0.2}, {5: True, 10: True}) == "does not hold"
    words = {trade_word(mask, (1.0, 1.0)) for mask in ((2.0, 0.5), (0.5, 0.5), (2.0, 2.0), (0.5, 2.0))}
    assert words == {"trades bias for variance", "dominates", "is dominated", "has less bias and more variance"}
    held = above([1.0, 1.1, 0.9, 1.0], effect=0.5)
    failed = above([0.0, 0.01, -0.01, 0.0], effect=0.5)
    unsure = above([1.0, -1.0, 0.5, -0.4], effect=0.2)
    assert (held.answer, failed.answer) == ("holds", "does not hold")
    assert both(held, held) == "holds" and both(held, failed) == "does not hold"
    assert both(held, unsure) == unsure.answer != "holds"
