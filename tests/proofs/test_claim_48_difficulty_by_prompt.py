"""Claim 48 (docs/claims.md): on the rearrangement task (tasks/permutation.py) a prompt has n! / prod_v c_x(v)!
optimal responses, so a uniform sample is optimal with that over V^n and prompts differ in difficulty from the first
epoch (Dr. GRPO's question-level difficulty bias, Liu et al. 2025, arXiv:2503.20783); sorting's exact-match has one
optimum per prompt. Exact by enumeration of every prompt and response of a small space.
"""

from __future__ import annotations

import itertools
import torch

from lab.exact.enumeration import all_probs, all_responses, reward_table
from lab.policies.factorized import Policy
from tasks import permutation
from tasks.catalog import make_named_task


def success_probabilities(task, reward: str, init_scale: float) -> torch.Tensor:
    """p = pi(R = 1 | x) per prompt, float64, of the lecture's initial policy (seed 5, dim 10) at `init_scale`."""
    policy = Policy(task.vocab_size, 3, 3, 10, generator=torch.Generator().manual_seed(5), init_scale=init_scale)
    probs = all_probs(policy, task.prompts, torch.float64)
    table = reward_table(task.prompts, task.reward_fn(reward), task.vocab_size, 3).double()
    return (probs * table).sum(-1)


def test_claim_48_a_rearrangement_prompts_uniform_chance_is_its_number_of_arrangements_over_the_space():
    """For every prompt of length 3 over 0..2 (27 of them), the count of responses that are its permutations is
    n! / prod_v c(v)! (6, 3 or 1), so a uniform sample is optimal with that over 27 (`uniform_success`). Mutant
    tried: n! alone (repeated tokens not divided out) fails on [0, 0, 1]."""
    responses = all_responses(3, 3)
    for prompt in itertools.product(range(3), repeat=3):
        task = permutation.make_task([list(prompt)], 3)
        count = int(reward_table(task.prompts, task.reward_fn("rearranged"), 3, 3).sum())
        assert count / len(responses) == permutation.uniform_success(list(prompt), 3)
        assert count == {3: 6, 2: 3, 1: 1}[len(set(prompt))]


def test_claim_48_the_default_prompts_differ_in_difficulty_by_their_arrangements():
    """permutation's own prompts [1, 0, 2], [3, 3, 4], [2, 2, 2] have 6, 3 and 1 optimal responses; at init scale
    0.1 (close to uniform) the initial policy's chance of an optimal sample follows that order on the three prompts,
    and is within a factor 2 of the uniform policy's 6/125, 3/125 and 1/125."""
    task = make_named_task("permutation")
    uniform = torch.tensor([permutation.uniform_success(p, 5) for p in task.prompts.tolist()], dtype=torch.float64)
    assert uniform.tolist() == [6 / 125, 3 / 125, 1 / 125]
    p = success_probabilities(task, "rearranged", 0.1)
    assert p[0] > p[1] > p[2]
    assert ((p / uniform) > 0.5).all() and ((p / uniform) < 2).all()
