"""Claim 46 (docs/claims.md): with a KL penalty, a frozen reference stops the policy at the KL-regularised optimum;
a reference that follows the policy (periodic refresh, or TR-DPO's mixing) lets it go on to the reward's maximiser.

In the tabular class (per prompt, logits over every response) the expected update is u = pi v with
v = a (r - E_pi r) - beta kappa(pi, pi_ref) (lab.exact.reference_flow). Frozen at pi_0 with k2 in the loss
(gradient of KL(pi || pi_0), claim 14) its fixed point is pi* = pi_0 exp(a r / beta) / Z (claim 26). A moving
reference reaches phi = theta at a fixed point, where kappa = 0 and v = a (r - E_pi r): only a policy on the
reward's maximisers is fixed, so E_pi[r] -> max r. So a synced reference ascends E[r] itself and the penalty acts as
a moving trust region. Sources: TR-DPO (Gorbatovski et al., arXiv:2404.09656) for the mixing rule, TRL's
`sync_ref_model`; the fixed-point argument is derived here. Checked by the exact iteration in float64.
"""

import pytest
import torch

from lab.exact.optimum import log_optimum
from lab.exact.reference_flow import follow_reference

REWARDS = torch.tensor([[0.0, 1.0, 0.5, 0.2, 0.0, 0.9], [0.3, 0.3, 1.0, 0.0, 0.6, 0.1]], dtype=torch.float64)


def initial(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(2, 6, generator=g, dtype=torch.float64), -1)


@pytest.mark.parametrize("seed", [0])
def test_claim_46_frozen_reference_stops_at_pi_star_and_a_following_one_at_the_maximiser(seed):
    """Frozen (k2, beta 0.5, a = 1): the end is pi* to 1e-6, below max r by more than 0.05. Periodic (alpha 1,
    every 10 steps) and synced (alpha 0.6, every 10; alpha 0.1 every 3) references end with E[r] within 1e-3 of
    max r, for k2 and for the lab's k3. Mutant: a 'reference' mixed toward pi_0 instead of the policy stays below
    the maximiser."""
    start = initial(seed)
    best = REWARDS.max(-1).values
    frozen = follow_reference(start, REWARDS, 0.5, 800, 4.0, estimator="k2")
    torch.testing.assert_close(frozen.log_probs, log_optimum(start, REWARDS, 0.5), rtol=0, atol=1e-6)
    assert (frozen.expected_reward[-1] < best - 0.05).all()
    for estimator in ("k2", "k3"):
        for alpha, every in ((1.0, 10), (0.6, 10), (0.1, 3)):
            moving = follow_reference(start, REWARDS, 0.5, 1500, 4.0, alpha=alpha, every=every,
                                      estimator=estimator)
            assert (moving.expected_reward[-1] > best - 1e-3).all(), (estimator, alpha, every)
    # the mutant: mixing toward the initial logits keeps the reference at pi_0, which is the frozen scheme
    mutant = follow_reference(start, REWARDS, 0.5, 800, 4.0, alpha=0.0, every=10, estimator="k2")
    assert (mutant.expected_reward[-1] < best - 0.05).all()
