"""Claim 40 (docs/claims.md): SAPO's soft gate silences no token. Its per-token gradient is -w(rho) d with
w(rho) = 4 rho sigma(tau (rho - 1)) (1 - sigma(tau (rho - 1))): w(1) = 1 (the policy gradient at theta_old),
w > 0 at every ratio, falling smoothly on both sides where PPO's clip drops to 0 at once; after S = 10 steps of lr
1 on one batch it keeps over 80% of the on-policy gradient where PPO's clip keeps under half, from each of 5 random
pi_old.

Source: SAPO (arXiv 2511.20347: a temperature-controlled soft gate in place of the hard clip, tau_neg > tau_pos);
TRL's loss_type="sapo" (tau_pos 1.0, tau_neg 1.05). Exact: the token formula by autograd, the lens by enumeration.
"""

import math

import pytest
import torch

from tests.proofs.proof_tools import LENS_SEEDS as SEEDS, lecture_lens

from lab.core.losses import compute_loss
from lab.exact.surrogate_lens import expected_gradient, inner_steps, kept_share, on_policy_gradient


@pytest.mark.parametrize("delta, tau", [(1.0, 1.0), (-1.0, 1.05)])
def test_claim_40_the_gate_weighs_each_token_by_a_positive_bell_equal_to_one_at_ratio_one(delta, tau):
    """The gradient of SAPO's loss on one token is -w(rho) d for rho from 0.05 to 20, w as stated (tau by the
    delta's sign); w(1) = 1 and w > 0 throughout. Mutant: the gate without its 4 / tau (w(1) = tau / 4) fails."""
    rhos = torch.tensor([0.05, 0.5, 0.9, 1.0, 1.1, 1.5, 3.0, 20.0], dtype=torch.float64)
    log_probs = rhos.log().view(1, -1, 1).clone().requires_grad_(True)
    deltas = torch.full((1, len(rhos)), delta, dtype=torch.float64)
    compute_loss(log_probs, deltas, "sapo", torch.zeros_like(log_probs), agg="seq-mean-token-sum").backward()
    s = torch.sigmoid(tau * (rhos - 1))
    weight = 4 * rhos * s * (1 - s)
    torch.testing.assert_close(log_probs.grad.view(-1) * len(rhos), -weight * delta, rtol=0, atol=1e-12)
    assert weight[3].item() == 1.0 and (weight > 0).all()
    assert abs(tau / 4 - 1) > 0.5  # the mutant's w(1)
    assert math.isclose(weight[3].item(), 1.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_claim_40_sapo_keeps_more_of_the_on_policy_gradient_than_the_hard_clip(seed):
    """kept at each loss's own theta_S: SAPO > 0.8 > 0.5 > PPO. Mutant: SAPO with tau = 30 on both sides (a gate
    close to a hard step) fails the 80%."""
    old, responses, advantages = lecture_lens(seed)

    def kept(loss: str, **settings) -> float:
        theta = inner_steps(old, advantages, loss, responses, 1.0, 10, **settings)
        g = expected_gradient(theta, old, advantages, loss, responses, **settings)
        return kept_share(g, on_policy_gradient(theta, advantages, responses)).mean().item()

    assert kept("clipped", clip_eps=0.2) < 0.5 < 0.8 < kept("sapo")
    assert kept("sapo", sapo_temperature_pos=30.0, sapo_temperature_neg=30.0) < 0.8
