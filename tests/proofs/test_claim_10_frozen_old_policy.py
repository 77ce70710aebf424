"""Claim 10 (docs/claims.md): an old policy that is not frozen gives a zero gradient.

The losses are the lab's `compute_loss`; the samples come from the lab's `sample_responses`.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.exact.enumeration import flat_grad
from lab.core.losses import compute_loss
from tests.proofs.proof_tools import close, sampled_batch, toys


@given(toy=toys(), G=st.integers(1, 4))
def test_claim_10_a_ratio_whose_old_log_probs_are_not_detached_has_zero_gradient(toy, G):
    """If pi_old is not detached (frozen), the ratio pi_theta / pi_old is identically 1 as a
    function of theta and its gradient is exactly zero: the lecture's freezing demo.

    Claim 10 (docs/claims.md), the CS336 lecture 17 notes (freezing the old policy). The lab's `ratios` detaches
    `old_log_probs`, so its unclipped loss keeps the naive gradient; the undetached mutant
    fails that check whenever the naive gradient is not zero.
    """
    log_probs, deltas = sampled_batch(toy, G)
    undetached = torch.exp(log_probs - log_probs)  # old log-probs from the same graph
    frozen_demo = flat_grad(-(undetached * deltas.unsqueeze(-1)).mean(), toy.policy)
    assert torch.equal(frozen_demo, torch.zeros_like(frozen_demo))

    naive = flat_grad(compute_loss(log_probs, deltas, "naive"), toy.policy)
    lab_ratio = flat_grad(compute_loss(log_probs, deltas, "unclipped", old_log_probs=log_probs), toy.policy)
    assert close(lab_ratio, naive)
    if float(naive.norm()) > 1e-6:
        assert not close(frozen_demo, naive)
