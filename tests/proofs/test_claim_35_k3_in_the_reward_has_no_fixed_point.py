"""Claim 35 (docs/claims.md): k3 in the reward ascends F(pi) = E_pi[R] - beta (KL(pi || pi_ref) - KL(pi_ref || pi)),
which is unbounded above: it has no maximum, and its exact expected-update flow never settles.

Derived here from claim 14's reward column (the direction beta multiplies for k3 in the reward is
grad KL(pi || pi_ref) - grad KL(pi_ref || pi)); verl's reward placement uses k1 (`kl_penalty="kl"`), whose
objective J_beta is bounded (claim 26). Exact in float64: F along a path, the natural update of
`lab.exact.expected_update` against autograd's gradient of F, and the flow of `lab.exact.update_flow`.
"""

import math

import torch

from lab.exact.expected_update import Method, Problem, natural_update
from lab.exact.optimum import kl_regularized_optimum
from lab.exact.update_flow import UpdateFlowConfig, follow

REF = torch.log_softmax(torch.tensor([[0.3, -0.2, 0.1, 0.0]], dtype=torch.float64), -1)
REWARDS = torch.tensor([[0.0, 1.0, 2.0, 3.0]], dtype=torch.float64)
BETA, G, C = 0.5, 2, 1


def objective(log_probs: torch.Tensor) -> torch.Tensor:
    """F(pi) per prompt: E_pi[R] - beta (KL(pi || pi_ref) - KL(pi_ref || pi)), float64[batch]."""
    probs, ref = log_probs.exp(), REF.exp()
    forward = (probs * (log_probs - REF)).sum(-1)
    reverse = (ref * (REF - log_probs)).sum(-1)
    return (probs * REWARDS).sum(-1) - BETA * (forward - reverse)


def test_claim_35_k3_in_the_reward_ascends_an_objective_unbounded_above():
    """Moving response 0's probability to eps = 1e-10, 1e-20, ..., 1e-100 (the rest kept in proportion), F rises by
    beta pi_ref(0) log(1e10) per step to 1e-8 (the first step also moves the other responses by eps log eps ~ 1e-9): it grows like beta pi_ref(y) log(1 / pi(y)), without bound, so no
    pi maximises it. Mutant: F with + KL(pi_ref || pi) (a bounded objective) falls instead and fails."""
    rest = REF[0, 1:].exp() / REF[0, 1:].exp().sum()
    values = []
    for k in range(1, 11):
        eps = 10.0 ** (-10 * k)
        probs = torch.cat([torch.tensor([eps], dtype=torch.float64), (1 - eps) * rest])
        values.append(float(objective(probs.log().unsqueeze(0))))
    steps = [b - a for a, b in zip(values, values[1:])]
    rise = BETA * float(REF[0, 0].exp()) * math.log(1e10)
    assert all(abs(s - rise) < 1e-8 for s in steps), steps


def test_claim_35_the_expected_update_of_k3_in_the_reward_is_the_gradient_of_that_objective():
    """The lab's exact natural update for k3 in the reward, times pi, is (s / C) grad_theta F at random logits:
    the flow ascends F. Mutant: the penalty's reverse-KL part with the wrong sign (1 - pi_ref / pi, as k3 in the
    loss) fails."""
    generator = torch.Generator().manual_seed(0)
    problem = Problem(REF, REWARDS, BETA, G, C)
    for _ in range(5):
        theta = torch.randn(1, 4, generator=generator, dtype=torch.float64).requires_grad_(True)
        log_probs = torch.log_softmax(theta, -1)
        grad = torch.autograd.grad(objective(log_probs).sum(), theta)[0] * (G - 1) / G / C
        update = natural_update(Method(estimator="k3", placement="reward"), theta.detach(), problem)
        assert torch.allclose(update * log_probs.detach().exp(), grad, rtol=1e-12, atol=1e-14)


def test_claim_35_the_flow_of_k3_in_the_reward_never_settles_where_k1_reaches_pi_star():
    """From pi_ref, k3 in the reward drives the worst response's log-prob below -200 within flow time 5 and is
    still moving (its update grows as pi_ref / pi); k1 in the reward, at the same beta, converges to
    pi*_beta = pi_ref exp(R / beta) / Z (claim 26). Mutant: the flow reported as converged when it stops at its
    step limit fails the first assertion."""
    problem = Problem(REF, REWARDS, BETA, G, C)
    k3 = follow(Method(estimator="k3", placement="reward"), problem, UpdateFlowConfig(max_steps=3000, max_time=5))
    assert not bool(k3.converged.any()) and float(k3.log_probs.min()) < -200 and float(k3.time) < 5
    k1 = follow(Method(estimator="k1", placement="reward"), problem, UpdateFlowConfig(max_steps=3000))
    assert bool(k1.converged.all())
    assert torch.allclose(k1.log_probs.exp(), kl_regularized_optimum(REF.exp(), REWARDS, BETA), atol=1e-7)
