"""Adaptive entropy control (lab.core.adaptive_entropy; Skywork-OR1 arXiv:2505.22312 section 3.2, TRL's
use_adaptive_entropy); parity with TRL's own `_compute_loss` is tests/bridge/test_trl_sampling_parity.py."""

import math

import torch

from lab.core.adaptive_entropy import applied_entropy_coef, next_entropy_coef


def test_the_coefficient_rises_below_target_and_falls_above_within_bounds():
    """Runs at entropy 0.1, 0.2 (= target, counts as below), 0.3, 0.1 with c = 0.5, 0.5, 0.5, 0.998 and delta 0.005,
    bounds [0, 1]: 0.505, 0.505, 0.495 and 1 (capped). And c = 0.002 above target falls to 0, not -0.003.
    Mutants tried: strict < at the target; no cap; no floor."""
    coef = torch.tensor([0.5, 0.5, 0.5, 0.998, 0.002], dtype=torch.float64)
    entropy = torch.tensor([0.1, 0.2, 0.3, 0.1, 0.3], dtype=torch.float64)
    out = next_entropy_coef(coef, entropy, 0.2, 0.005, 0.0, 1.0)
    torch.testing.assert_close(out, torch.tensor([0.505, 0.505, 0.495, 1.0, 0.0], dtype=torch.float64),
                               rtol=0, atol=1e-15)


def test_the_bonus_applies_only_while_the_last_entropy_is_at_or_below_target():
    """applied = c where H_last <= H*, else 0; before any measurement H_last = +inf, so nothing applies (TRL).
    Mutant tried: applying c always."""
    coef = torch.tensor([0.3, 0.3, 0.3], dtype=torch.float64)
    last = torch.tensor([0.1, 0.2, math.inf], dtype=torch.float64)
    assert applied_entropy_coef(coef, last, 0.2).tolist() == [0.3, 0.3, 0.0]
