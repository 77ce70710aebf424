"""lab.exact.reverse_kl: the optimum of E[r] - beta KL(pi_ref || pi), where GRPO with k3 in the loss goes.

pi'(y) = beta pi_ref(y) / (lambda - r(y)) with sum_y pi'(y) = 1 (the Lagrangian's stationary point); checked
in tabular logits (the gradient vanishes, rivals are worse) and against the expected update of claim 14.
"""

import pytest
import torch

from lab.exact import optimum as O
from lab.exact.reverse_kl import effective_beta, reverse_objective, reverse_optimum
from tests.exact.test_optimum import PROMPTS, factorised


def tables(seed: int, n: int = 6):
    generator = torch.Generator().manual_seed(seed)
    ref = torch.softmax(torch.randn(2, n, generator=generator, dtype=torch.float64) * 1.5, -1)
    rewards = torch.randint(0, 4, (2, n), generator=generator).double()
    return ref, rewards


@pytest.mark.parametrize("beta", [0.05, 0.5, 3.0])
@pytest.mark.parametrize("seed", range(4))
def test_the_reverse_optimum_is_the_stationary_point_and_beats_every_rival(seed, beta):
    """grad_theta J'_beta(softmax(theta)) = 0 at theta = log pi' (to 1e-10), and random rivals score lower.
    Mutant: pi* (the forward optimum at the same beta) is not stationary for J'_beta."""
    ref, rewards = tables(seed)
    best = reverse_optimum(ref, rewards, beta)
    assert torch.allclose(best.sum(-1), torch.ones(2, dtype=torch.float64))

    def gradient(probs):
        theta = probs.log().requires_grad_(True)
        value = reverse_objective(torch.softmax(theta, -1), ref, rewards, beta).sum()
        return torch.autograd.grad(value, theta)[0]

    assert float(gradient(best).abs().max()) < 1e-10
    generator = torch.Generator().manual_seed(seed + 100)
    for _ in range(5):
        rival = torch.softmax(best.log() + torch.randn(best.shape, generator=generator, dtype=torch.float64), -1)
        assert bool((reverse_objective(rival, ref, rewards, beta) < reverse_objective(best, ref, rewards, beta)).all())
    star = O.kl_regularized_optimum(ref, rewards, beta)
    assert float(gradient(star).abs().max()) > 1e-4


@pytest.mark.parametrize("group_size", [2, 5, 10])
def test_grpo_k3_in_the_loss_stops_at_the_reverse_optimum_of_beta_over_the_group_scale(group_size):
    """Claim 14's expected update of k3 in the loss with centered deltas, (G-1)/G grad J - beta grad KL(pi_ref || pi),
    vanishes in tabular logits at pi' of beta G / (G-1); k2 in the loss and k1 in the reward (both grad
    KL(pi || pi_ref)) vanish at pi* of beta G / (G-1) and of beta. Mutant: pi' of beta itself is not the fixed point."""
    ref, rewards = tables(7)
    beta, scale = 0.3, (group_size - 1) / group_size

    def update(probs, forward: bool, whole: bool):
        theta = probs.log().requires_grad_(True)
        pi = torch.softmax(theta, -1)
        j = (pi * rewards).sum(-1)
        kl = O.kl_divergence(pi, ref) if forward else (torch.xlogy(ref, ref) - torch.xlogy(ref, pi)).sum(-1)
        value = scale * (j - beta * kl) if whole else scale * j - beta * kl
        return torch.autograd.grad(value.sum(), theta)[0]

    prime = effective_beta(beta, scale)
    assert float(update(reverse_optimum(ref, rewards, prime), False, False).abs().max()) < 1e-10
    assert float(update(O.kl_regularized_optimum(ref, rewards, prime), True, False).abs().max()) < 1e-10
    assert float(update(O.kl_regularized_optimum(ref, rewards, beta), True, True).abs().max()) < 1e-10
    assert float(update(reverse_optimum(ref, rewards, beta), False, False).abs().max()) > 1e-4


def test_best_in_class_ascends_the_reverse_objective_below_its_tabular_optimum():
    """In the factorised class the reverse ascent raises J'_beta above the start and stays below J'_beta(pi')."""
    policy, beta = factorised(4), 0.3
    result = O.best_in_class(policy, PROMPTS, "distance", beta, objective="reverse",
                             config=O.AscentConfig(starts=2))
    ref_log_probs, rewards = O.policy_tables(policy, PROMPTS, "distance")
    start = reverse_objective(ref_log_probs.exp(), ref_log_probs.exp(), rewards, beta)
    best = reverse_objective(reverse_optimum(ref_log_probs.exp(), rewards, beta), ref_log_probs.exp(), rewards, beta)
    assert result.converged
    assert bool((result.objective.mean() > start.mean())) and bool((result.objective <= best + 1e-9).all())
