"""Claim 38 (docs/claims.md): clip-higher moves only the upper clip bound. A token with d > 0 and a ratio in
(1 + eps, 1 + eps_high] keeps its gradient -rho d, the negative side is PPO's; so at any theta the expected fraction
of tokens it silences is at most PPO's (exactly, by enumeration; from 4 of 5 random pi_old strictly less after 10 steps). Whether that keeps the policy's entropy up, as
DAPO reports, one batch does not decide: after S = 10 steps of lr 1 from 5 random pi_old, clip-higher ends above
PPO's entropy from some and below it from others (the training verdict is in RESULTS.md).

Source: DAPO (arXiv 2503.14476), section 3.1 (clip-higher, eps_low 0.2, eps_high 0.28); TRL `epsilon_high`.
"""

import math

import pytest
import torch

from tests.proofs.proof_tools import LENS_SEEDS as SEEDS, lecture_lens

from lab.core.losses import compute_loss
from lab.exact.surrogate_lens import inner_steps, token_log_probs


@pytest.mark.parametrize("rho, delta, ppo, higher", [
    (1.25, 1.0, 0.0, -1.25), (1.3, 1.0, 0.0, 0.0), (0.75, -1.0, 0.0, 0.0), (1.25, -1.0, 1.25, 1.25)])
def test_claim_38_clip_higher_keeps_the_tokens_between_the_two_upper_bounds(rho, delta, ppo, higher):
    """eps = 0.2, eps_high = 0.28. Mutant: eps_high on both sides (the 0.75 token kept) fails."""
    for settings, expected in ((dict(clip_eps=0.2), ppo), (dict(clip_eps=0.2, epsilon_high=0.28), higher)):
        log_probs = torch.tensor([[[math.log(rho)]]], dtype=torch.float64, requires_grad=True)
        compute_loss(log_probs, torch.tensor([[delta]], dtype=torch.float64), "clipped",
                     torch.zeros(1, 1, 1, dtype=torch.float64), **settings).backward()
        assert log_probs.grad.item() == pytest.approx(expected, abs=1e-12)


def silenced(theta, old, responses, advantages, eps: float, eps_high: float) -> float:
    """E_{y ~ pi_old} of the fraction of y's tokens whose clipped term has no gradient, mean over prompts."""
    rho = (token_log_probs(theta, responses) - token_log_probs(old, responses)).exp()
    d = advantages.unsqueeze(-1)
    off = ((rho > 1 + eps_high) & (d > 0)) | ((rho < 1 - eps) & (d < 0))
    weights = token_log_probs(old, responses).sum(-1).exp()
    return (weights * off.double().mean(-1)).sum(-1).mean().item()


def test_claim_38_clip_higher_never_silences_more_tokens_than_ppo():
    """At PPO's theta_S (10 steps, lr 1) from each pi_old: silenced(eps_high 0.28) <= silenced(0.2), strictly less
    from 4 of the 5 (from the fifth no token's ratio falls between 1.2 and 1.28). Mutant: the comparison reversed
    fails."""
    pairs = []
    for seed in SEEDS:
        old, responses, advantages = lecture_lens(seed)
        theta = inner_steps(old, advantages, "clipped", responses, 1.0, 10, clip_eps=0.2)
        pairs.append([silenced(theta, old, responses, advantages, 0.2, e) for e in (0.2, 0.28)])
    assert all(higher <= ppo for ppo, higher in pairs)
    assert sum(higher < ppo for ppo, higher in pairs) == 4


def test_claim_38_one_batch_does_not_decide_the_entropy_claim():
    """Entropy of theta_S (mean over prompts and positions) under clip-higher minus PPO's: positive from some pi_old,
    negative from others. The claim's mutant, 'clip-higher's entropy is higher from every pi_old', fails here."""
    def entropy(theta):
        log_p = torch.log_softmax(theta, -1)
        return -(log_p.exp() * log_p).sum(-1).mean().item()

    differences = []
    for seed in SEEDS:
        old, responses, advantages = lecture_lens(seed)
        ppo = inner_steps(old, advantages, "clipped", responses, 1.0, 10, clip_eps=0.2)
        higher = inner_steps(old, advantages, "clipped", responses, 1.0, 10, clip_eps=0.2, epsilon_high=0.28)
        differences.append(entropy(higher) - entropy(ppo))
    assert min(differences) < 0 < max(differences)
