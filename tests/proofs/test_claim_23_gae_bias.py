"""Claim 23 (docs/claims.md): with any critic, GAE with lambda = 1 leaves the expected policy gradient
equal to grad J; with lambda < 1 and a critic other than V^pi it does not, and the bias is exactly

    E[g] - grad J = E[ sum_t (1 - lambda) sum_{l >= 1} lambda^(l-1) e(s_{t+l}) grad log pi(a_t | s_t) ]

with e = V - V^pi (0 after the end) and g = sum_t A_t grad log pi(a_t | s_t), the per-response estimator.
lambda = 1 gives A_t = R - V(s_t): V(s_t) does not depend on a_t, a baseline at every state (the
baseline theorem, claim 2, state by state). With one state per response (a cap of one token) every e(s_{t+l})
is e(s_0), a baseline, so any critic is unbiased at every lambda. Source: Schulman et al. 2016 (GAE),
section 3 (lambda < 1 trades bias for variance); the GRPO textbook chapter for the baseline theorem. Exact: every response
of an autoregressive toy enumerated, grad J by autograd of the exact J.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.exact import critic_error
from lab.exact import values as exact_values
from tests.proofs.critic_tools import make_critic_toy
from tests.proofs.proof_tools import TOL, close


def bias_formula(toy, lam: float, shift: int = 0) -> torch.Tensor:
    """The right side, from the critic's error on every response: float[batch params]. The mutant
    (`shift=1`) raises lambda to the power l instead of l - 1."""
    error = toy.on_responses([c - v for c, v in zip(toy.critic, exact_values.state_values(
        toy.policy, toy.prompts, toy.rewards))])  # e(s_t) on every response, 0 on padding
    length = error.shape[-1]
    weights = torch.zeros_like(error)
    for t in range(length):
        for step in range(1, length - t):
            weights[..., t] += (1 - lam) * lam ** (step - 1 + shift) * error[..., t + step]
    return toy.expected_token_gradient(weights * toy.mask)


@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(2, 3), cap=st.integers(1, 3))
def test_claim_23_lambda_one_is_unbiased_for_any_critic(seed, vocab, cap):
    """lambda = 1: E[g] = grad J exactly, for a random critic. Mutant: an action-dependent baseline,
    V(s_{t+1}) in place of V(s_t) (A_t = R - V(s_{t+1})), moves the expectation."""
    toy = make_critic_toy(seed, vocab, cap)
    grad_j = toy.grad_j()
    assert close(critic_error.expected_gae_gradient(toy.policy, toy.prompts, toy.rewards, toy.critic, 1.0), grad_j)
    advantages, _ = toy.lab_gae(toy.critic, 1.0)  # the lab's GAE on every response, averaged exactly
    assert close(toy.expected_token_gradient(advantages), grad_j)

    values = toy.on_responses(toy.critic)
    following = torch.cat([values[..., 1:], torch.zeros_like(values[..., :1])], dim=-1)  # V(s_{t+1}), 0 at the end
    mutant = toy.expected_token_gradient((toy.rewards.unsqueeze(-1) - following) * toy.mask)
    if cap > 1:
        assert float((mutant - grad_j).norm()) > TOL.differs


@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(2, 3), cap=st.integers(2, 3),
       lam=st.sampled_from([0.0, 0.5, 0.9]))
def test_claim_23_lambda_below_one_is_biased_unless_the_critic_is_v_pi_and_the_bias_is_exact(seed, vocab, cap, lam):
    """lambda < 1: with V = V^pi, E[g] = grad J; with a random critic, E[g] - grad J is not 0 and equals the
    formula above. Mutant: the formula with lambda^l for lambda^(l-1) misses the bias."""
    toy = make_critic_toy(seed, vocab, cap)
    grad_j = toy.grad_j()
    v_pi = exact_values.state_values(toy.policy, toy.prompts, toy.rewards)
    assert close(critic_error.expected_gae_gradient(toy.policy, toy.prompts, toy.rewards, v_pi, lam), grad_j)

    advantages, _ = toy.lab_gae(toy.critic, lam)
    bias = toy.expected_token_gradient(advantages) - grad_j
    assert float(bias.norm()) > TOL.differs  # the counterexample: a wrong critic, lambda < 1
    assert torch.allclose(bias, bias_formula(toy, lam), rtol=1e-8, atol=1e-10)
    exact = critic_error.expected_gae_gradient(toy.policy, toy.prompts, toy.rewards, toy.critic, lam) - grad_j
    assert torch.allclose(exact, bias, rtol=1e-8, atol=1e-10)  # lab.exact.critic_error's recursion agrees
    assert not torch.allclose(bias, bias_formula(toy, lam, shift=1), rtol=1e-4, atol=TOL.differs)


@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(2, 3), lam=st.sampled_from([0.0, 0.5, 0.9]))
def test_claim_23_with_one_state_per_response_any_critic_is_unbiased_at_every_lambda(seed, vocab, lam):
    """A cap of one token: the only state is the prompt's, so the critic's error is a baseline and E[g] = grad J
    for a random critic at every lambda (the factorised policy's critic, which sees only the prompt, is this
    case). Mutant: the same critic with a cap of 2 is biased at lambda < 1 (the test above)."""
    toy = make_critic_toy(seed, vocab, 1)
    advantages, _ = toy.lab_gae(toy.critic, lam)
    assert close(toy.expected_token_gradient(advantages), toy.grad_j())
