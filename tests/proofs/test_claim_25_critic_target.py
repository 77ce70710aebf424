"""Claim 25 (docs/claims.md): the critic's population regression target is V^pi. Over the states the
policy visits, the expected squared error of a critic against the returns,

    L(V) = E_{y ~ pi} sum_t m_t (V(s_t) - R)^2  =  sum_t sum_u P(s_t = u) [(V(u) - V^pi(u))^2 + Var(R | u)],

is minimised exactly by V = V^pi at every reachable state (its gradient vanishes there and any other V
costs sum P(s_t = u) (V(u) - V^pi(u))^2 more). The GAE targets R_t = A_t + V(s_t) have mean
E[R_t | s_t] = V^pi(s_t) + (1 - lambda) sum_{l >= 1} lambda^(l-1) E[e(s_{t+l}) | s_t], e = V - V^pi: the
Monte Carlo return (lambda = 1) for any critic, and V^pi is a fixed point for every lambda; with
lambda < 1 the targets of a wrong critic are biased by its own errors downstream.

Source: the GRPO textbook chapter (the critic V_psi is trained beside the policy by regression on
returns); Schulman et al. 2016 (GAE), section 5, value-function regression on lambda-returns. Exact:
every response of an autoregressive toy; the critic is a free table, one value per state.
"""

import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from lab.exact import values as exact_values
from tests.proofs.critic_tools import given_state, make_critic_toy
from tests.proofs.proof_tools import TOL


def expected_loss(toy, tables):
    """L(V) by enumeration, per prompt: float[batch] (differentiable in the tables)."""
    squares = (toy.on_responses(tables) - toy.rewards.unsqueeze(-1)) ** 2 * toy.mask
    return (toy.probs() * squares.sum(-1)).sum(-1)


@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(2, 3), cap=st.integers(2, 3))
def test_claim_25_the_minimiser_of_the_expected_squared_error_is_v_pi(seed, vocab, cap):
    """The gradient of L at V^pi is 0 and L(V^pi + eps) - L(V^pi) = sum P(s_t = u) eps(u)^2 for a random eps.
    Mutant: the prompt's value J(x) = V^pi(s_0) at every state (the group mean's target, broadcast) is not
    a minimiser."""
    toy = make_critic_toy(seed, vocab, cap)
    v_pi = [v.clone().requires_grad_() for v in exact_values.state_values(toy.policy, toy.prompts, toy.rewards)]
    loss = expected_loss(toy, v_pi)
    gradients = torch.autograd.grad(loss.sum(), v_pi)
    assert max(float(g.abs().max()) for g in gradients) < 1e-12

    visits = exact_values.visit_probs(toy.policy, toy.prompts)
    moved = [v.detach() + c for v, c in zip(v_pi, toy.critic)]  # eps = the toy's random critic table
    extra = sum((w * c ** 2).sum(-1) for w, c in zip(visits, toy.critic))
    assert torch.allclose(expected_loss(toy, moved) - loss.detach(), extra, rtol=1e-9, atol=1e-12)

    prompt_value = [v_pi[0].detach().expand(-1, vocab ** t) for t in range(cap)]  # J(x) at every prefix
    assume(float(visits[1].sum(-1).min()) > 0.05)  # told apart only where the policy goes on after one token
    assert float((expected_loss(toy, prompt_value) - loss.detach()).min()) > TOL.differs


@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(2, 3), cap=st.integers(2, 3),
       lam=st.sampled_from([0.0, 0.5, 0.9, 1.0]))
def test_claim_25_gae_targets_have_mean_v_pi_at_lambda_one_and_at_v_pi(seed, vocab, cap, lam):
    """E[R_t | s_t] = V^pi(s_t) with V = V^pi for every lambda, and with a random critic at lambda = 1;
    with a random critic and lambda < 1 it is V^pi plus the critic's discounted errors downstream
    (the formula above), not V^pi: the counterexample, checked to exceed the margin."""
    toy = make_critic_toy(seed, vocab, cap)
    v_pi = exact_values.state_values(toy.policy, toy.prompts, toy.rewards)
    _, targets = toy.lab_gae(v_pi, lam)
    for mean, truth in zip(given_state(toy, targets, with_action=False), v_pi):
        assert torch.allclose(mean, truth, rtol=TOL.rtol, atol=1e-10)

    _, targets = toy.lab_gae(toy.critic, lam)
    error = toy.on_responses([c - v for c, v in zip(toy.critic, v_pi)])
    downstream = torch.zeros_like(error)
    for t in range(cap):
        for step in range(1, cap - t):
            downstream[..., t] += (1 - lam) * lam ** (step - 1) * error[..., t + step]
    means = given_state(toy, targets, with_action=False)
    shifts = given_state(toy, downstream * toy.mask, with_action=False)
    for mean, truth, shift in zip(means, v_pi, shifts):
        assert torch.allclose(mean, truth + shift, rtol=1e-9, atol=1e-10)
    gap = max(float((mean - truth).abs().max()) for mean, truth in zip(means, v_pi))
    assert gap < 1e-9 if lam == 1.0 else gap > TOL.differs
