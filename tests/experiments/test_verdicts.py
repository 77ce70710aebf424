"""lab.experiments.verdicts: every rule RESULTS.md uses returns each of its answers on planted effects, at the seed
counts the sections run (5 and 20), and its detectable effect is the one its interval clears with 80% probability.

Mutants tried: `_sign` without its "does not hold" branch (a null seen with enough seeds then reads
"inconclusive", as the old sign rules did) fails test_every_answer_of_every_rule_is_reachable; `stopped` as the
old plateau rule (+-10% of the level, no test of growth) fails test_stopped_fails_on_slow_significant_growth; the
detectable shift with the normal critical value 1.96 in place of t_{0.975, n-1} fails the Monte Carlo check;
`share_above` judged "does not hold" whenever the interval does not lie above (no "underpowered") fails
test_a_stuck_share_of_ten_percent_cannot_fail_at_twenty_seeds.
"""

import math

import numpy as np
import pytest
from scipy import optimize, stats

from lab.experiments import verdicts as v
from lab.experiments.intervals import wilson_interval
from tests.experiments.planted import half_width, planted, spread_for

SEED_COUNTS = (5, 20)
"""The sections' seed counts: the TRL comparison ran 5, the others 20."""
EFFECT = 1.0


def _inconclusive_design(n: int, effect: float) -> tuple[float, float]:
    """(mean, spread) whose interval straddles 0 and reaches past `effect` while the design detects 0.9 effect."""
    unit = v.detectable_shift(planted(n, 0.0, 1.0)[0] - planted(n, 0.0, 1.0)[1])
    spread = 0.9 * effect / unit
    return 0.9 * half_width(n, spread), spread


def _cases(n: int) -> dict:
    """rule name -> {answer: the rule's call on a planted sample that should give it}."""
    small, big = spread_for(n, 0.15), spread_for(n, 2.0)
    mean, spread = _inconclusive_design(n, EFFECT)
    near = spread_for(n, 0.2)
    return {
        "above": {v.HOLDS: lambda: v.above(*planted(n, EFFECT, small), effect=EFFECT),
                  v.FAILS: lambda: v.above(*planted(n, 0.0, small), effect=EFFECT),
                  v.UNDERPOWERED: lambda: v.above(*planted(n, 0.5, big), effect=EFFECT),
                  v.INCONCLUSIVE: lambda: v.above(*planted(n, mean, spread), effect=EFFECT)},
        "below": {v.HOLDS: lambda: v.below(*planted(n, -EFFECT, small), effect=EFFECT),
                  v.FAILS: lambda: v.below(*planted(n, 0.0, small), effect=EFFECT),
                  v.UNDERPOWERED: lambda: v.below(*planted(n, -0.5, big), effect=EFFECT),
                  v.INCONCLUSIVE: lambda: v.below(*planted(n, -mean, spread), effect=EFFECT)},
        "within": {v.HOLDS: lambda: v.within(*planted(n, 0.0, small), margin=EFFECT),
                   v.FAILS: lambda: v.within(*planted(n, 3 * EFFECT, small), margin=EFFECT),
                   v.UNDERPOWERED: lambda: v.within(*planted(n, 0.0, big), margin=EFFECT),
                   v.INCONCLUSIVE: lambda: v.within(*planted(n, 0.9 * EFFECT, near), margin=EFFECT)},
        "stopped": {v.FAILS: lambda: v.stopped(*planted(n, EFFECT, small), tolerance=EFFECT),
                    v.HOLDS: lambda: v.stopped(*planted(n, 0.0, small), tolerance=EFFECT),
                    v.UNDERPOWERED: lambda: v.stopped(*planted(n, 0.0, big), tolerance=EFFECT),
                    v.INCONCLUSIVE: lambda: v.stopped(*planted(n, mean, spread), tolerance=EFFECT)},
        "mostly": {v.HOLDS: lambda: v.mostly(planted(n, 0.95, 0.02)[0] - planted(n, 0, 0)[1], share=0.1),
                   v.FAILS: lambda: v.mostly(planted(n, 0.03, 0.02)[0] - planted(n, 0, 0)[1], share=0.1),
                   v.PARTLY: lambda: v.mostly(planted(n, 0.5, 0.05)[0] - planted(n, 0, 0)[1], share=0.1),
                   v.INCONCLUSIVE: lambda: v.mostly(planted(n, 0.9, 0.05)[0] - planted(n, 0, 0)[1], share=0.1),
                   v.UNDERPOWERED: lambda: v.mostly(np.resize([0.0, 1.0], n), share=0.1) if n <= 5 else
                   v.mostly(np.resize([0.0, 1.0], 4), share=0.1)},
        "exact": {v.HOLDS: lambda: v.exact(1.0 + 1e-12, 1.0, tolerance=1e-9),
                  v.FAILS: lambda: v.exact(3.69, 0.0, tolerance=1e-9)},
    }


@pytest.mark.parametrize("n", SEED_COUNTS)
def test_every_answer_of_every_rule_is_reachable(n):
    """Each rule, fed paired samples with a planted effect at, beyond and short of its margin (and a null), returns
    each of its answers at the sections' seed counts: none is a rule that can only say one thing."""
    for rule, cases in _cases(n).items():
        for answer, call in cases.items():
            verdict = call()
            assert verdict.answer == answer, (rule, n, answer, verdict)
            assert verdict.answer in v.ANSWERS


def test_every_answer_of_the_share_rules_is_reachable_where_the_design_can_see_both_sides():
    """share_above and share_below at 20 runs and share 1/2, enumerating every count: each of holds, does not hold
    and inconclusive comes out; with 3 runs no count can clear 1/2, so the straddling counts say underpowered."""
    for rule in (v.share_above, v.share_below):
        answers = {rule(k, 20, share=0.5).answer for k in range(21)}
        assert answers == {v.HOLDS, v.FAILS, v.INCONCLUSIVE}
        assert {rule(k, 3, share=0.5).answer for k in range(4)} == {v.UNDERPOWERED}


def test_a_stuck_share_of_ten_percent_cannot_fail_at_twenty_seeds():
    """'Runs get stuck' (more than 10% of runs) cannot come out "does not hold" with 20 runs: even 0 of 20 has a
    Wilson interval reaching 16%. The rule says underpowered there instead; 35 runs are the fewest where 0 stuck
    runs clears 10% (Wilson's high z^2 / (n + z^2) < 0.1)."""
    answers = [v.share_above(k, 20, share=0.1).answer for k in range(21)]
    assert v.FAILS not in answers and answers[0] == v.UNDERPOWERED and v.HOLDS in answers
    fewest = next(n for n in range(2, 100) if wilson_interval(0, n).high < 0.1)
    assert fewest == 35 and v.share_above(0, 35, share=0.1).answer == v.FAILS


@pytest.mark.parametrize("n", SEED_COUNTS)
def test_a_non_inferiority_claim_reaches_every_answer(n):
    """"a reaches b within m" (`above` with margin = refute = -m, effect m): a planted difference of 0 holds with a
    tight spread, -2m does not hold, -m/2 straddling with a wide spread is underpowered. Mutant: refute left at its
    default (margin + effect = 0) turns a difference of -m/2 seen tightly into "does not hold", though it is within
    m; the tight -m/2 case holds here."""
    m = 0.25
    rule = lambda mean, spread: v.above(*planted(n, mean, spread), margin=-m, refute=-m, effect=m).answer  # noqa: E731
    assert rule(0.0, spread_for(n, 0.02)) == v.HOLDS and rule(-m / 2, spread_for(n, 0.02)) == v.HOLDS
    assert rule(-2 * m, spread_for(n, 0.02)) == v.FAILS and rule(-m / 2, spread_for(n, 1.0)) == v.UNDERPOWERED


def test_stopped_fails_on_slow_significant_growth():
    """The issue's offline Bradley-Terry DPO numbers: growth of the sampled KL over the late window +0.82 with a
    paired interval [0.27, 1.37] at 20 seeds: the old rule (+-10% of a level near 11) said "stopped"; `stopped`
    says "does not hold"."""
    n = 20
    spread = (1.37 - 0.27) / 2 / (stats.t.ppf(0.975, n - 1) / math.sqrt(n))
    late, early = planted(n, 0.82, spread)
    verdict = v.stopped(late, early, tolerance=0.1 * 11.17)
    assert verdict.answer == v.FAILS and verdict.interval.low == pytest.approx(0.27, abs=1e-9)


@pytest.mark.parametrize("n", SEED_COUNTS)
def test_the_detectable_shift_is_cleared_four_times_in_five(n):
    """At a true mean equal to `detectable_shift` (normal differences, the std as planted), the paired interval's
    low end clears 0 in 80% of 4000 simulated designs (fixed seed; tolerance 0.03, about 4 binomial std)."""
    spread = 1.3
    shift = v.detectable_shift(planted(n, 0.0, spread)[0] - planted(n, 0.0, spread)[1])
    rng = np.random.default_rng(7)
    d = shift + spread * rng.standard_normal((4000, n))
    low = d.mean(1) - stats.t.ppf(0.975, n - 1) * d.std(1, ddof=1) / math.sqrt(n)
    assert (low > 0).mean() == pytest.approx(v.POWER, abs=0.03)


def test_the_wilson_reach_matches_the_binomial_tail_solved_directly():
    """At 20 runs a Wilson interval lies above 1/2 from 15 successes on; the reach is the p where
    P(Binomial(20, p) >= 15) = 0.8, solved by root finding, to the rule's grid (0.5 / 2000)."""
    assert wilson_interval(15, 20).low > 0.5 > wilson_interval(14, 20).low
    p = optimize.brentq(lambda p: stats.binom.sf(14, 20, p) - 0.8, 0.5, 1.0)
    assert v.share_above(10, 20, share=0.5).detectable == pytest.approx(p - 0.5, abs=0.5 / 2000 + 1e-12)


def test_pairing_is_what_lets_the_rules_see_the_planted_effects():
    """The planted arms share a seed-to-seed spread of 5; their paired difference is seen (holds), the same arms
    compared as independent samples are not (Welch's interval straddles 0)."""
    from lab.experiments.intervals import difference_interval

    a, b = planted(20, EFFECT, spread_for(20, 0.15))
    assert v.above(a, b, effect=EFFECT).answer == v.HOLDS
    assert difference_interval(a, b).low < 0 < difference_interval(a, b).high
