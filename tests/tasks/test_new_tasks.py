"""What the two tasks beyond sorting teach (docs/tasks.md), each claim checked exactly by enumeration.

reverse (tasks/reverse.py): under its sparse default a group of G samples carries a gradient only when its 0/1
rewards differ, with probability 1 - (1 - p)^G - p^G (p = pi(target | x)); at the lecture's initialisation that is
rare on every prompt. The group baselines' exact zeros on equal rewards: lab.core.deltas (the DAPO paper's
"dynamic sampling" filters such groups: Yu et al. 2025, arXiv:2503.14476).
permutation (tasks/permutation.py): the number of optimal responses differs by prompt, n! / prod_v c_x(v)!, so
prompts differ in difficulty from the first epoch (Dr. GRPO's question-level difficulty, Liu et al. 2025,
arXiv:2503.20783); and a factorised policy cannot be optimal and spread over several optima.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from lab.core.deltas import compute_deltas
from lab.exact.enumeration import all_probs, all_responses, reward_table
from lab.policies.factorized import Policy
from tasks import permutation, reverse
from tasks.catalog import make_named_task


def success_probabilities(task, reward: str, init_scale: float) -> torch.Tensor:
    """p = pi(R = 1 | x) per prompt, float64, of the lecture's initial policy (seed 5, dim 10) at `init_scale`."""
    policy = Policy(task.vocab_size, 3, 3, 10, generator=torch.Generator().manual_seed(5), init_scale=init_scale)
    probs = all_probs(policy, task.prompts, torch.float64)
    table = reward_table(task.prompts, task.reward_fn(reward), task.vocab_size, 3).double()
    return (probs * table).sum(-1)


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.93, 1.0])
def test_a_groups_chance_of_unequal_zero_one_rewards_is_one_minus_both_uniform_outcomes(p):
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


def test_a_group_of_equal_rewards_moves_no_group_baseline_policy():
    """centered, normalized and loo deltas are exact zeros on a group of equal 0/1 rewards (all wrong or all right),
    so such a group adds nothing to the loss's gradient; raw deltas of an all-right group do not vanish."""
    for rewards in ([0.0] * 10, [1.0] * 10):
        for mode in ("centered", "normalized", "loo"):
            assert compute_deltas(torch.tensor([rewards]), mode).abs().max() == 0
    assert compute_deltas(torch.tensor([[1.0] * 10]), "raw").abs().max() == 1


def test_at_the_lectures_initialisation_a_reversal_group_rarely_carries_a_gradient():
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


def test_a_rearrangement_prompts_uniform_chance_is_its_number_of_arrangements_over_the_space():
    """For every prompt of length 3 over 0..2 (27 of them), the count of responses that are its permutations is
    n! / prod_v c(v)! (6, 3 or 1), so a uniform sample is optimal with that over 27 (`uniform_success`). Mutant
    tried: n! alone (repeated tokens not divided out) fails on [0, 0, 1]."""
    responses = all_responses(3, 3)
    for prompt in itertools.product(range(3), repeat=3):
        task = permutation.make_task([list(prompt)], 3)
        count = int(reward_table(task.prompts, task.reward_fn("rearranged"), 3, 3).sum())
        assert count / len(responses) == permutation.uniform_success(list(prompt), 3)
        assert count == {3: 6, 2: 3, 1: 1}[len(set(prompt))]


def test_the_default_prompts_differ_in_difficulty_by_their_arrangements():
    """permutation's own prompts [1, 0, 2], [3, 3, 4], [2, 2, 2] have 6, 3 and 1 optimal responses; at init scale
    0.1 (close to uniform) the initial policy's chance of an optimal sample follows that order on the three prompts,
    and is within a factor 2 of the uniform policy's 6/125, 3/125 and 1/125."""
    task = make_named_task("permutation")
    uniform = torch.tensor([permutation.uniform_success(p, 5) for p in task.prompts.tolist()], dtype=torch.float64)
    assert uniform.tolist() == [6 / 125, 3 / 125, 1 / 125]
    p = success_probabilities(task, "rearranged", 0.1)
    assert p[0] > p[1] > p[2]
    assert ((p / uniform) > 0.5).all() and ((p / uniform) < 2).all()


def test_a_factorised_policy_optimal_on_a_prompt_of_distinct_tokens_puts_its_mass_on_one_arrangement():
    """A factorised policy's support is a product S_1 x S_2 x S_3 of per-position supports; of all 7^3 such products
    over {0, 1, 2} the ones made only of permutations of [0, 1, 2] are the 6 single arrangements. So a factorised
    policy with P(rearranged) = 1 is one arrangement: optimal, yet it cannot stay random over the optima (an
    autoregressive policy can)."""
    subsets = [s for r in (1, 2, 3) for s in itertools.combinations(range(3), r)]
    inside = [sets for sets in itertools.product(subsets, repeat=3)
              if all(permutation.rearranged_reference([0, 1, 2], list(y)) == 1 for y in itertools.product(*sets))]
    assert len(inside) == 6 and all(len(s) == 1 for sets in inside for s in sets)
