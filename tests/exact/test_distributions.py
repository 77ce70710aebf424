"""A factorised policy's distribution two ways (lab.exact.distributions): position by position, and as the table
of every response's log-prob gathered by lab.exact.enumeration. The fast one must give the plain one's numbers."""

import torch
from torch import Tensor

from lab.exact.distributions import Factorized, Table
from lab.exact.enumeration import _sequence_log_probs, all_responses

GEN = torch.Generator().manual_seed(0)


def positions(*shape: int) -> Tensor:
    return torch.log_softmax(3 * torch.randn(*shape, generator=GEN, dtype=torch.float64), dim=-1)


def test_outer_sums_are_the_gathered_table_in_all_responses_order():
    """V = 4, L = 3 (no symmetry hides a wrong digit order), two runs of two prompts."""
    log_softmax = positions(2, 2, 3, 4)
    fast = Factorized(log_softmax).log_probs()
    plain = torch.stack([_sequence_log_probs(run) for run in log_softmax])
    torch.testing.assert_close(fast, plain, rtol=0, atol=1e-12)
    responses = all_responses(4, 3)
    r, b, y = 1, 0, 37  # one response by hand
    by_hand = sum(float(log_softmax[r, b, q, responses[y, q]]) for q in range(3))
    assert abs(float(fast[r, b, y]) - by_hand) < 1e-12


def test_expectations_and_kls_summed_position_by_position_equal_the_tables():
    """For values per run and prompt and for values shared by the runs (broadcast), and the KL to another policy."""
    policy, other = Factorized(positions(3, 2, 3, 4)), Factorized(positions(3, 2, 3, 4))
    table, other_table = Table(policy.log_probs()), Table(other.log_probs())
    for values in (torch.randn(3, 2, 64, generator=GEN, dtype=torch.float64),
                   torch.randn(2, 64, generator=GEN, dtype=torch.float64)):
        torch.testing.assert_close(policy.expectation(values), table.expectation(values), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(policy.kl(other), table.kl(other_table), rtol=1e-10, atol=1e-12)
    assert policy.expectation(torch.ones(64, dtype=torch.float64)).sub(1).abs().max() < 1e-12  # sums to 1
    assert float(policy.kl(policy).abs().max()) == 0.0
