"""Claim 49 (docs/claims.md): a factorised policy whose every sample is a permutation of a prompt of distinct tokens
puts all its mass on one arrangement: its support is a product of per-position sets, and the only such products
inside the permutations are single responses. So on tasks/permutation.py the factorised policy's optimum is one
arrangement per prompt, where an autoregressive policy can stay random over all of them. Exact: every product of
non-empty subsets enumerated.
"""

from __future__ import annotations

import itertools

from tasks import permutation


def test_claim_49_a_factorised_policy_optimal_on_a_prompt_of_distinct_tokens_puts_its_mass_on_one_arrangement():
    """A factorised policy's support is a product S_1 x S_2 x S_3 of per-position supports; of all 7^3 such products
    over {0, 1, 2} the ones made only of permutations of [0, 1, 2] are the 6 single arrangements. So a factorised
    policy with P(rearranged) = 1 is one arrangement: optimal, yet it cannot stay random over the optima (an
    autoregressive policy can)."""
    subsets = [s for r in (1, 2, 3) for s in itertools.combinations(range(3), r)]
    inside = [sets for sets in itertools.product(subsets, repeat=3)
              if all(permutation.rearranged_reference([0, 1, 2], list(y)) == 1 for y in itertools.product(*sets))]
    assert len(inside) == 6 and all(len(s) == 1 for sets in inside for s in sets)
