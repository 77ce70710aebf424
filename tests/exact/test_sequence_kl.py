"""`lab.exact.sequence_kl`: the KL between two policies' whole-response distributions (lessons 3 and 5)."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.policies.factorized import Policy
from lab.exact.enumeration import all_log_probs, sequence_kl

TOLERANCE = 1e-10
"""float64 sums over at most 5^3 = 125 responses."""


@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(2, 5), length=st.integers(1, 3))
def test_sequence_kl_is_the_kl_of_the_enumerated_response_distributions(seed, vocab, length):
    """sum_y pi(y) (log pi(y) - log ref(y)) over every response equals the sum of per-position KLs."""
    generator = torch.Generator().manual_seed(seed)
    policy, reference = (Policy(vocab, length, length, dim=4, generator=generator) for _ in range(2))
    prompts = torch.randint(vocab, (3, length), generator=generator)
    log_pi = all_log_probs(policy, prompts, torch.float64)  # float[batch n]
    log_ref = all_log_probs(reference, prompts, torch.float64)
    brute_force = (log_pi.exp() * (log_pi - log_ref)).sum(-1)
    assert torch.allclose(sequence_kl(policy, reference, prompts, torch.float64), brute_force, atol=TOLERANCE)


def test_sequence_kl_is_zero_for_a_policy_and_itself_and_positive_otherwise():
    policy = Policy(5, 3, 3, generator=torch.Generator().manual_seed(5))
    other = Policy(5, 3, 3, generator=torch.Generator().manual_seed(6))
    prompts = torch.tensor([[1, 0, 2], [3, 2, 4], [1, 2, 3]])
    assert torch.equal(sequence_kl(policy, policy, prompts, torch.float64), torch.zeros(3, dtype=torch.float64))
    assert (sequence_kl(policy, other, prompts, torch.float64) > 0).all()
