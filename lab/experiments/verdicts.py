"""Verdict rules: a claim about seeds answered from an interval, with the smallest effect the design could see.

    paired differences  d_i = a_i - b_i over n seeds (runs sharing seed i),  s = std(d) (Bessel)
    interval            mean(d) +- t_{0.975, n-1} s / sqrt(n)                      (lab.experiments.intervals)
    detectable effect   the smallest true mean(d) - margin the interval clears with probability POWER:
                        P(T > t_{0.975, n-1}) = POWER,  T ~ noncentral t(n-1, delta sqrt(n) / s)   (scipy.stats.nct)
    fractions (Wilson)  the smallest |p - share| whose Binomial(n, p) count gives a Wilson interval
                        clear of `share` with probability POWER, by enumerating the n + 1 counts

Every rule returns a `Verdict` whose answer is one of `ANSWERS`. A sign rule (`above`, `below`) asks for an
effect of interest: it "holds" when the interval clears the margin, "does not hold" when the interval rules out
an effect that large (a null seen with enough seeds says so, not "inconclusive"), and is "underpowered" when
the interval straddles both and the design could not have seen that effect (detectable > effect), else
"inconclusive". `within` is an equivalence test; `stopped` asks whether growth over a late window has
ended (paired: the same seed's value at the window's end minus its start), and fails when growth is
significant; `share_above`/`share_below` judge a fraction of runs; `mostly` a mean share against share
and 1 - share; `exact` compares a deterministic (float64, seedless) number with a target.
tests/experiments/test_verdicts.py plants each effect and shows every answer of every rule is reachable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from lab.experiments.intervals import LEVEL, Interval, mean_interval, probability_interval, wilson_interval

POWER = 0.8
"""The probability at which an effect counts as detectable (the usual 80%)."""
HOLDS, FAILS, INCONCLUSIVE, UNDERPOWERED, PARTLY = "holds", "does not hold", "inconclusive", "underpowered", "partly"
ANSWERS = (HOLDS, FAILS, INCONCLUSIVE, UNDERPOWERED, PARTLY)


@dataclass(frozen=True)
class Verdict:
    """A rule's answer, the interval it read, the smallest effect its design detects at POWER and the effect the
    claim needs (a margin or an effect of interest), in the interval's units."""

    answer: str
    interval: Interval
    detectable: float
    needed: float

    def text(self, digits: int = 3) -> str:
        """`**holds** (detectable 0.12, needs 0.2)`: the answer with the design's reach beside it."""
        reach = "exact" if self.interval.n == 0 else f"detectable {self.detectable:.{digits}g}"
        return f"**{self.answer}** ({reach}, needs {self.needed:.{digits}g})"


def cells(verdict: Verdict, numbers: str | None = None, digits: int = 3) -> str:
    """A RESULTS.md row's last three cells: `| interval | detectable / needs | **answer** |` (`numbers` replaces
    the interval's text where a section shows it otherwise)."""
    detectable = "out of reach" if math.isinf(verdict.detectable) else f"{verdict.detectable:.{digits}g}"
    reach = "exact (no seeds)" if verdict.interval.n == 0 else f"{detectable} / {verdict.needed:.{digits}g}"
    return f"| {numbers or verdict.interval.text(digits)} | {reach} | **{verdict.answer}** |"


def pair(a, seeds_a, b, seeds_b) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) float[run] each, matched by seed: what the paired rules take from two settings that ran the same
    seeds (in any order); a ValueError where the seeds differ or repeat."""
    seeds_a, seeds_b = [int(s) for s in seeds_a], [int(s) for s in seeds_b]
    if len(set(seeds_a)) < len(seeds_a) or sorted(seeds_a) != sorted(seeds_b):
        raise ValueError("paired settings must run the same distinct seeds")
    return (np.asarray(a, dtype=float)[np.argsort(seeds_a)], np.asarray(b, dtype=float)[np.argsort(seeds_b)])


def differences(a, b=None) -> np.ndarray:
    """float[run]: a - b per seed (b None: a itself); pairs with a NaN dropped."""
    a = np.asarray(a, dtype=float)
    d = a if b is None else a - np.asarray(b, dtype=float)
    return d[~np.isnan(d)]


def detectable_shift(d, level: float = LEVEL, power: float = POWER) -> float:
    """The smallest true mean shift the paired t-interval of d clears on one side with probability `power`
    (noncentral t, the observed std taken as the true one): inf with under 2 values, 0 if they do not vary."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    if n < 2:
        return math.inf
    s = float(d.std(ddof=1))
    if s == 0:
        return 0.0
    critical, se = stats.t.ppf(1 - (1 - level) / 2, n - 1), s / math.sqrt(n)
    reach = lambda delta: float(stats.nct.sf(critical, n - 1, delta / se)) - power  # noqa: E731
    return float(optimize.brentq(reach, 0.0, 20 * se * (critical + 3), xtol=1e-12 * se))


def _sign(d, margin: float, effect: float, level: float, refute: float | None = None) -> Verdict:
    interval, detect = mean_interval(d, level), detectable_shift(d, level)
    if interval.low > margin:
        answer = HOLDS
    elif interval.high < (margin + effect if refute is None else refute):
        answer = FAILS  # the interval rules out an effect as large as the one asked about
    else:
        answer = UNDERPOWERED if detect > effect else INCONCLUSIVE
    return Verdict(answer, interval, detect, effect)


def above(a, b=None, *, effect: float, margin: float = 0.0, refute: float | None = None,
          level: float = LEVEL) -> Verdict:
    """"mean(a - b) > margin", judged against an effect of interest `effect` > 0 (module docstring): does not hold
    where the interval lies below `refute` (default margin + effect; a non-inferiority claim, "a reaches b within
    m", passes margin = refute = -m and effect m: the design must see the distance from no difference to -m)."""
    if not effect > 0:
        raise ValueError(f"effect must be > 0, got {effect}")
    return _sign(differences(a, b), margin, effect, level, refute)


def below(a, b=None, *, effect: float, margin: float = 0.0, refute: float | None = None,
          level: float = LEVEL) -> Verdict:
    """"mean(a - b) < margin": `above` of the negated differences (refute default margin - effect); the interval
    reported in a - b's units."""
    if not effect > 0:
        raise ValueError(f"effect must be > 0, got {effect}")
    flipped = _sign(-differences(a, b), -margin, effect, level, None if refute is None else -refute)
    i = flipped.interval
    return Verdict(flipped.answer, Interval(-i.estimate, -i.high, -i.low, i.n), flipped.detectable, effect)


def equivalence_reach(d, level: float = LEVEL, power: float = POWER) -> float:
    """The smallest margin the interval falls inside with probability `power` when the true mean(d) is 0:
    (t_{1-a/2} + t_{(1+power)/2}) s / sqrt(n), the observed std taken as the true one (inf with under 2 values)."""
    d = np.asarray(d, dtype=float)
    if len(d) < 2:
        return math.inf
    df = len(d) - 1
    return float((stats.t.ppf(1 - (1 - level) / 2, df) + stats.t.ppf((1 + power) / 2, df))
                 * d.std(ddof=1) / math.sqrt(len(d)))


def within(a, b=None, *, margin: float, level: float = LEVEL) -> Verdict:
    """"mean(a - b) lies within +-margin": holds if the interval lies inside, does not hold if wholly outside,
    underpowered if the design's interval cannot fit inside (equivalence_reach > margin), else inconclusive."""
    d = differences(a, b)
    interval, reach = mean_interval(d, level), equivalence_reach(d, level)
    if -margin <= interval.low and interval.high <= margin:
        answer = HOLDS
    elif interval.low > margin or interval.high < -margin:
        answer = FAILS
    else:
        answer = UNDERPOWERED if reach > margin else INCONCLUSIVE
    return Verdict(answer, interval, reach, margin)


def stopped(late, early, *, tolerance: float, level: float = LEVEL) -> Verdict:
    """"The quantity has stopped rising": growth = late - early per seed over a late window. Does not hold if the
    growth is significantly above 0 (a test that can fail); holds if its interval lies below `tolerance`;
    underpowered if the design could not see growth of `tolerance`, else inconclusive."""
    d = differences(late, early)
    interval, detect = mean_interval(d, level), detectable_shift(d, level)
    if interval.low > 0:
        answer = FAILS
    elif interval.high < tolerance:
        answer = HOLDS
    else:
        answer = UNDERPOWERED if detect > tolerance else INCONCLUSIVE
    return Verdict(answer, interval, detect, tolerance)


def _wilson_reach(n: int, share: float, level: float, power: float, upward: bool) -> float:
    """Smallest |p - share| at which a Binomial(n, p) count's Wilson interval clears `share` on the given side
    with probability `power`, by enumeration of the counts over a grid of p (inf where no p does)."""
    counts = np.arange(n + 1)
    clear = np.array([(wilson_interval(k, n, level).low > share) if upward else (wilson_interval(k, n, level).high < share)
                      for k in counts])
    grid = np.linspace(share, 1.0, 2001) if upward else np.linspace(share, 0.0, 2001)
    chance = stats.binom.pmf(counts[None, :], n, grid[:, None]) @ clear
    hits = np.nonzero(chance >= power)[0]
    return float(abs(grid[hits[0]] - share)) if len(hits) else math.inf


def _share(successes: int, n: int, share: float, level: float, upward: bool) -> Verdict:
    interval = wilson_interval(successes, n, level)
    reach = max(_wilson_reach(n, share, level, POWER, True), _wilson_reach(n, share, level, POWER, False))
    above_share, below_share = interval.low > share, interval.high < share
    if above_share or below_share:
        answer = HOLDS if above_share == upward else FAILS
    else:
        answer = UNDERPOWERED if math.isinf(reach) or reach > min(share, 1 - share) else INCONCLUSIVE
    return Verdict(answer, interval, reach, min(share, 1 - share))


def share_above(successes: int, n: int, *, share: float, level: float = LEVEL) -> Verdict:
    """"More than `share` of the runs": Wilson. Underpowered when the design cannot clear `share` on both sides
    at POWER for any true fraction (e.g. 10% with 20 runs: even 0 of 20 gives a Wilson high of 16%)."""
    return _share(successes, n, share, level, True)


def share_below(successes: int, n: int, *, share: float, level: float = LEVEL) -> Verdict:
    """"Fewer than `share` of the runs": `share_above`'s mirror."""
    return _share(successes, n, share, level, False)


def mostly(shares, *, share: float, level: float = LEVEL) -> Verdict:
    """A mean share over runs (percentile bootstrap) against share and 1 - share: holds above 1 - share (nearly
    all), does not hold below share (nearly none), partly between them, else underpowered or inconclusive (the
    paired-t detectable shift of the shares against the gap between the two bounds)."""
    shares = np.asarray(shares, dtype=float)
    interval, detect = probability_interval(shares, level), detectable_shift(shares, level)
    if interval.low > 1 - share:
        answer = HOLDS
    elif interval.high < share:
        answer = FAILS
    elif share < interval.low and interval.high < 1 - share:
        answer = PARTLY
    else:
        answer = UNDERPOWERED if detect > 1 - 2 * share else INCONCLUSIVE
    return Verdict(answer, interval, detect, 1 - 2 * share)


def exact(value: float, target: float, *, tolerance: float) -> Verdict:
    """A deterministic number (an exact flow, float64): holds if |value - target| <= tolerance, else does not
    hold. No seeds, so detectable is 0 and the interval is the point (n = 0)."""
    answer = HOLDS if abs(value - target) <= tolerance else FAILS
    return Verdict(answer, Interval(float(value), float(value), float(value), 0), 0.0, tolerance)
