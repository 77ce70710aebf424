"""`lab trl-compare`'s verdict (lab.experiments.trl_comparison.comparison_rows) is the interaction, tested directly.

Issue 35: "the aggregation makes little difference does not carry over" was decided by comparing each learner's
category, which is no test of the interaction (TRL minus lab, paired: -0.198 [-0.481, 0.085] at 5 seeds)."""

import numpy as np

from lab.experiments import verdicts as v
from lab.experiments.trl_comparison import COMPARISON, ComparisonResult, comparison_rows
from lab.experiments.trl_section import section_markdown
from tests.experiments.planted import planted

SEEDS = 20


def _result(lab_effect: float, trl_effect: float, spread: float) -> ComparisonResult:
    """Planted final rewards: setting 1 minus setting 0 (and 2 minus 0) is lab_effect for the lab and trl_effect for
    TRL per seed, exactly in the mean, with the stated spread; curves float[2 seed checkpoint]."""
    points = len(COMPARISON.checkpoints())
    base = np.full((2, SEEDS, points), 3.0)
    lab_a, lab_b = planted(SEEDS, lab_effect, spread, seed=1)
    trl_a, trl_b = planted(SEEDS, trl_effect, spread, seed=2)

    def curves(a, b):
        first, second = base.copy(), base.copy()
        first[0, :, -1], second[0, :, -1] = b, a
        return [first, second, second]

    return ComparisonResult(COMPARISON, SEEDS, curves(lab_a, lab_b), curves(trl_a, trl_b), 5.0)


def test_the_carry_over_verdict_is_the_paired_interaction_within_the_margin():
    """Both learners' effect 0 -> holds; TRL's effect 1 (4x the 0.25 margin) where the lab's is 0 -> does not hold,
    though each learner alone may read "inconclusive"; a spread of 2 per seed -> underpowered (the design cannot fit
    an interval inside +-0.25 with 20 seeds). Mutant: the old rule (same decided category for both learners) gives
    "inconclusive" for the noisy case, where the design is what cannot tell, and fails."""
    same, differ, noisy = (comparison_rows(_result(*case))[0] for case in ((0.0, 0.0, 0.1), (0.0, 1.0, 0.1),
                                                                          (0.0, 0.0, 2.0)))
    assert (same["verdict"], differ["verdict"], noisy["verdict"]) == (v.HOLDS, v.FAILS, v.UNDERPOWERED)
    interaction = differ["interaction"].interval
    assert abs(interaction.estimate - 1.0) < 1e-12  # TRL's effect minus the lab's, per seed


def test_the_report_shows_the_interaction_and_what_the_design_detects():
    text = section_markdown(_result(0.0, 1.0, 0.1), {"trl": "0.0"})
    row = next(line for line in text.splitlines() if line.startswith("| normalized - centered"))
    assert row.endswith("**does not hold** |") and "1.000 [" in row and " / 0.25 |" in row
