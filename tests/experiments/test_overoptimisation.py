"""The over-optimisation experiment's pieces: Gao et al.'s fits, the exact paths, the verdict rules."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from lab.exact.best_of_n import kl_bound
from lab.experiments.overoptimisation import (OVEROPTIMISATION, Curve, best_of_n_curve, fit_gao, optimum_curve,
                                              run_overoptimisation)
from lab.experiments.overoptimisation_section import peaks_and_falls, section_lines
from lab.experiments.verdicts import ANSWERS
from tasks.sorting import make_task


def test_fit_gao_recovers_both_forms_exactly():
    """Noise-free points of d (alpha - beta d) and d (alpha - beta log d) give back alpha, beta, the peak
    alpha / (2 beta) and exp(alpha / beta - 1), with a zero residual, where a straight line leaves one."""
    d = np.linspace(0.1, 4, 25)
    bon = fit_gao(d, d * (1.2 - 0.3 * d), "bon")
    assert (bon["alpha"], bon["beta"]) == pytest.approx((1.2, 0.3), abs=1e-10)
    assert bon["peak_d"] == pytest.approx(2.0, abs=1e-9) and bon["rms"] < 1e-12 < bon["line_rms"]
    rl = fit_gao(d, d * (0.8 - 0.5 * np.log(d)), "rl")
    assert (rl["alpha"], rl["beta"]) == pytest.approx((0.8, 0.5), abs=1e-10)
    assert rl["peak_d"] == pytest.approx(math.exp(0.8 / 0.5 - 1), abs=1e-9)


def test_paths_start_at_the_base_policy_and_best_of_n_stays_under_the_kl_bound():
    """Best-of-1 and pi*_beta at a huge beta are pi_0 itself (d = 0, gold = E_pi0[R]); the proxy never falls
    along best-of-n; every best-of-n point's d^2 is at most log n - (n-1)/n."""
    g = torch.Generator().manual_seed(0)
    base = torch.softmax(torch.randn(2, 30, generator=g, dtype=torch.float64), -1)
    gold = torch.randint(0, 5, (2, 30), generator=g).double()
    proxy = gold + torch.randn(2, 30, generator=g, dtype=torch.float64)
    ns = (1, 2, 8, 64)
    bon = best_of_n_curve(base, gold, proxy, ns)
    start = float((base * gold).sum(-1).mean())
    assert bon.d[0] == pytest.approx(0, abs=1e-7) and bon.gold[0] == pytest.approx(start, abs=1e-12)
    assert np.all(np.diff(bon.proxy) >= -1e-12)
    assert all(d ** 2 <= kl_bound(n) + 1e-12 for d, n in zip(bon.d, ns))
    near = optimum_curve(base, gold, proxy, (1e6,))
    assert near.d[0] == pytest.approx(0, abs=1e-3) and near.gold[0] == pytest.approx(start, abs=1e-5)


def test_peak_and_fall_rule():
    """A gold curve that peaks before its end and ends more than 0.01 lower counts, with a rising proxy;
    a monotone gold curve or a falling proxy does not."""
    rising = np.array([0.0, 1.0, 2.0, 3.0])
    assert peaks_and_falls(Curve(np.array([1.0, 2.0, 1.5, 1.2]), rising, rising))
    assert not peaks_and_falls(Curve(np.array([1.0, 2.0, 2.5, 3.0]), rising, rising))
    assert not peaks_and_falls(Curve(np.array([1.0, 2.0, 1.5, 1.2]), rising[::-1], rising))


def test_a_small_run_writes_every_verdict_with_its_rule():
    """Two seeds, one short GRPO budget: the section has a verdict per claim (holds, does not hold or
    inconclusive) and the fits' table."""
    experiment = replace(OVEROPTIMISATION, proxies=(("small", 16), ("small", 64)), best_of=(1, 4, 64),
                         kl_weights=(0.0, 0.5), dpo_betas=(0.5,), epochs=4, rm_steps=50, betas=(10.0, 0.1))
    results = run_overoptimisation(make_task(), 2, experiment)
    text = "\n".join(section_lines(results, 2, experiment))
    verdicts = [line for line in text.splitlines() if line.startswith("| ") and "**" in line]
    # per proxy: the share, best-of-n from pi_0 and from the peaked pi_0; the optimum path; GRPO without a penalty;
    # then KL 0.5 against none; DPO against GRPO at KL 0.5 once per set of pairs
    assert len(verdicts) == 2 * 3 + 2 + 2 + 1 + 2
    for result in results.values():  # the trained paths: the start, then each epoch's exact values
        for curves in (*result["rl"].values(), *result["dpo"].values()):
            assert all(len(c.d) == 1 + 4 and c.d[0] == 0 and np.all(np.isfinite(c.gold)) for c in curves.values())
    assert "| small, 64 pairs | DPO on its pairs, beta 0.5 |" in text
    assert all(any(f"**{answer}**" in line for answer in ANSWERS) for line in verdicts)
    assert "detectable at 80% power / needed" in text and "k1 in the reward: ascends J_beta, pi_0 frozen" in text
    assert "| small, 64 pairs | pi*_beta |" in text
