"""Claim 37 (docs/claims.md): CISPO keeps the gradient of the tokens PPO's clip silences. Per token, -sg(min(rho,
eps_max)) d l has gradient -min(rho, eps_max) d where PPO's has 0 (d > 0, rho > 1 + eps; d < 0, rho < 1 - eps); in
expectation, after S = 10 steps of lr 1 on one batch, CISPO keeps over 80% of the on-policy gradient where PPO's
clip (eps = 0.2) keeps under half, in each of 5 random pi_old; a cap that binds (eps_max = 1.2) keeps less than
no cap, and a cap that never binds is the unclipped loss exactly.

Source: MiniMax-M1 (arXiv 2506.13585), section 3.1 (CISPO: clip the importance-sampling weight, not the token's
update); TRL's loss_type="cispo" (eps_max = epsilon_high, ScaleRL arXiv 2510.13786). Exact: enumeration.
"""

import math

import pytest
import torch

from tests.proofs.proof_tools import LENS_SEEDS as SEEDS, lecture_lens

from lab.core.losses import compute_loss
from lab.exact.surrogate_lens import expected_gradient, inner_steps, kept_share, on_policy_gradient


def token_gradient(loss: str, rho: float, delta: float, **settings) -> float:
    log_probs = torch.tensor([[[math.log(rho)]]], dtype=torch.float64, requires_grad=True)
    compute_loss(log_probs, torch.tensor([[delta]], dtype=torch.float64), loss,
                 torch.zeros(1, 1, 1, dtype=torch.float64), **settings).backward()
    return log_probs.grad.item()


@pytest.mark.parametrize("rho, delta", [(1.5, 1.0), (0.5, -1.0), (8.0, 2.0)])
def test_claim_37_a_token_ppo_silences_keeps_a_capped_gradient_under_cispo(rho, delta):
    """PPO (eps 0.2): 0; CISPO (eps_max 5): -min(rho, 5) d. Mutant: CISPO's weight without its stop-gradient
    (gradient -w d (1 + log rho) below the cap) fails at rho = 1.5 and 0.5."""
    assert token_gradient("clipped", rho, delta, clip_eps=0.2) == 0.0
    assert token_gradient("cispo", rho, delta, epsilon_high=5.0) == pytest.approx(-min(rho, 5.0) * delta, abs=1e-12)
    mutant = -min(rho, 5.0) * delta * (1 + math.log(rho))
    assert token_gradient("cispo", rho, delta, epsilon_high=5.0) != pytest.approx(mutant, abs=1e-6) or rho > 5


@pytest.mark.parametrize("seed", SEEDS)
def test_claim_37_after_steps_on_one_batch_cispo_keeps_more_of_the_on_policy_gradient_than_the_clip(seed):
    """kept = <g, g_on> / <g_on, g_on> at each loss's own theta_S. Mutant: CISPO with a cap of 0.3 (< 1: a weight
    that shrinks every token) fails the claim's 80%."""
    old, responses, advantages = lecture_lens(seed)

    def kept(loss: str, **settings) -> float:
        theta = inner_steps(old, advantages, loss, responses, 1.0, 10, **settings)
        g = expected_gradient(theta, old, advantages, loss, responses, **settings)
        return kept_share(g, on_policy_gradient(theta, advantages, responses)).mean().item()

    ppo, cispo, binding, free = (kept("clipped", clip_eps=0.2), kept("cispo", epsilon_high=5.0),
                                 kept("cispo", epsilon_high=1.2), kept("unclipped"))
    assert ppo < 0.5 < 0.8 < cispo
    assert binding < cispo and cispo == pytest.approx(free, abs=1e-12)
    assert kept("cispo", epsilon_high=0.3) < 0.8  # the mutant's cap
