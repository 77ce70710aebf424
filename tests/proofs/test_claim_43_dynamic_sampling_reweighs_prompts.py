"""Claim 43 (docs/claims.md): under a group baseline, dynamic sampling multiplies each prompt's expected update by
its expected cost S_N = sum_{k<N} q^k, and changes nothing else.

A group whose rewards are all equal has zero centered, normalized and loo deltas, so it contributes nothing to the
update; the kept group's law is p(g) S_N on groups with signal (claim 42), so E[update | kept] = S_N E[update]:
the direction of each prompt's expected update is unchanged, and a prompt where signal is rare (q near 1) weighs
up to 1 / (1 - q) times more in the batch. Derived here from DAPO's filter (arXiv:2503.14476, section 3.2).
Checked by enumerating every group of G from four responses in float64.
"""

import itertools
import math

import pytest
import torch

from lab.core.deltas import compute_deltas
from lab.exact.dynamic_sampling import expected_draws, no_signal_probability, value_probs

PROBS = torch.tensor([0.55, 0.25, 0.15, 0.05], dtype=torch.float64)
REWARDS = torch.tensor([0.0, 0.0, 1.0, 3.0], dtype=torch.float64)


def expected_update(mode, group_size, kept_law):
    """sum_g P(g) (1/G) sum_i d_i (e_{y_i} - pi): the update in logits, over every group g."""
    total = torch.zeros(4, dtype=torch.float64)
    for g in itertools.product(range(4), repeat=group_size):
        deltas = compute_deltas(REWARDS[list(g)], mode)
        scores = torch.nn.functional.one_hot(torch.tensor(g), 4).double() - PROBS
        total += kept_law(g) * (deltas.unsqueeze(-1) * scores).mean(0)
    return total


def kept(group_size, cap):
    q = no_signal_probability(value_probs(PROBS, REWARDS)[1], group_size)
    s = expected_draws(q, cap).item()

    def law(g):
        p = math.prod(PROBS[i].item() for i in g)
        return p * (s if len({REWARDS[i].item() for i in g}) > 1 else q.item() ** (cap - 1))
    return law, s


@pytest.mark.parametrize("mode", ["centered", "normalized", "loo"])
@pytest.mark.parametrize("group_size, cap", [(2, 3), (3, 2), (2, 10)])
def test_claim_43_dynamic_sampling_scales_each_prompts_expected_update_by_its_cost(mode, group_size, cap):
    """E[update | kept] = S_N E[update] to 1e-12 for every group baseline. Mutant: raw deltas (flat groups of
    reward 1 or 3 carry nonzero deltas) break the identity."""
    law, s = kept(group_size, cap)
    plain = expected_update(mode, group_size, lambda g: math.prod(PROBS[i].item() for i in g))
    torch.testing.assert_close(expected_update(mode, group_size, law), s * plain, rtol=1e-12, atol=1e-14)
    raw_plain = expected_update("raw", group_size, lambda g: math.prod(PROBS[i].item() for i in g))
    assert not torch.allclose(expected_update("raw", group_size, law), s * raw_plain, rtol=1e-6, atol=1e-9)
