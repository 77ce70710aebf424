"""Claim 47 (docs/claims.md): under a 0/1 reward a group of G samples carries a gradient with probability
1 - (1 - p)^G - p^G (p = pi(target | x)); a group baseline gives an equal group exact zeros; on the reversal task
(tasks/reverse.py) at the lecture's initialisation that is rare on every prompt.

DAPO's dynamic sampling filters such groups (Yu et al. 2025, arXiv:2503.14476); exact by enumeration of every group of
a small space, and of the lecture's initial policy's whole response distribution in float64.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from lab.core.deltas import compute_deltas
from lab.exact.enumeration import all_probs, all_responses, reward_table
from lab.policies.factorized import Policy
from tasks import reverse
from tasks.catalog import make_named_task


def success_probabilities(task, reward: str, init_scale: float) -> torch.Tensor:
    """p = pi(R = 1 | x) per prompt, float64, of the lecture's initial policy (seed 5, dim 10) at `init_scale`."""
    policy = Policy(task.vocab_size, 3, 3, 10, generator=torch.Generator().manual_seed(5), init_scale=init_scale)
    probs = all_probs(policy, task.prompts, torch.float64)
    table = reward_table(task.prompts, task.reward_fn(reward), task.vocab_size, 3).double()
    return (probs * table).sum(-1)


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.93, 1.0])
def test_claim_47_a_groups_chance_of_unequal_zero_one_rewards_is_one_minus_both_uniform_outcomes(p):
    """P(a group of G = 3 has unequal 0/1 rewards) = 1 - (1 - p)^3 - p^3: every one of the 4^3 groups of a
    two-token response space over {0, 1} enumerated, the target [1, 0] (reversed prompt [0, 1]) holding mass p.
    Mutant tried: 1 - (1 - p)^G (the all-correct group forgotten) fails at p = 0.5."""
    responses = all_responses(2, 2).tolist()  # [0,0], [0,1], [1,0], [1,1]
    prompt = [0, 1]
    mass = {tuple(y): (p if y == [1, 0] else (1 - p) / 3) for y in responses}
    unequal = sum(math.prod(mass[tuple(y)] for y in group)
                  for group in itertools.product(responses, repeat=3)
                  if len({reverse.exact_match_reference(prompt, y) for y in group}) > 1)
    assert unequal == pytest.approx(float(reverse.signal_probability(torch.tensor(p, dtype=torch.float64), 3)),
                                    abs=1e-12)


def test_claim_47_a_group_of_equal_rewards_moves_no_group_baseline_policy():
    """centered, normalized and loo deltas are exact zeros on a group of equal 0/1 rewards (all wrong or all right),
    so such a group adds nothing to the loss's gradient; raw deltas of an all-right group do not vanish."""
    for rewards in ([0.0] * 10, [1.0] * 10):
        for mode in ("centered", "normalized", "loo"):
            assert compute_deltas(torch.tensor([rewards]), mode).abs().max() == 0
    assert compute_deltas(torch.tensor([[1.0] * 10]), "raw").abs().max() == 1


def test_claim_47_at_the_lectures_initialisation_a_reversal_group_rarely_carries_a_gradient():
    """Reverse on the lecture's prompts, exact-match, G = 10, the lecture's initial policy (seed 5, init scale 1):
    a group carries a gradient with probability below 7% on every prompt, and below 1e-9 on [3, 2, 4] (p = 7e-17);
    at init scale 0.1 (a flatter start) below 9% on every prompt: most epochs teach nothing either way. Sorting's
    lecture reward (inclusion-ordering) gives partial credit: its groups almost always differ (tests of
    `zero_std_prob`, lab.exact.exploration)."""
    task = make_named_task("reverse")
    lecture = reverse.signal_probability(success_probabilities(task, "exact-match", 1.0), 10)
    flat = reverse.signal_probability(success_probabilities(task, "exact-match", 0.1), 10)
    assert (lecture < 0.07).all() and lecture[1] < 1e-9
    assert (flat < 0.09).all() and (flat > 0.05).all()
