"""Claim 24 (docs/claims.md): with lambda = 0 the advantages are the deltas, and on every response they
sum to R - V(s_0) for any critic (V = 0 after the last token), while GRPO gives every token the same
R - b; with the critic at V^pi each delta_t is Q^pi(s_t, a_t) - V^pi(s_t): credit per token that no
advantage constant over a response, GRPO's included, can give.

    sum_t delta_t = sum_t (r_t + V(s_{t+1}) - V(s_t)) = R + V(s_T) - V(s_0) = R - V(s_0)

Source: Schulman et al. 2016 (GAE), the telescoping sum of TD residuals; the GRPO textbook chapter,
on GRPO broadcasting one sequence-level advantage to every token (coarse credit assignment that a
per-token critic refines). Exact: every response of an autoregressive toy.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.core.deltas import compute_deltas
from lab.core.gae import terminal_rewards
from lab.exact import values as exact_values
from tests.proofs.critic_tools import given_state, make_critic_toy
from tests.proofs.proof_tools import TOL


@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(2, 3), cap=st.integers(1, 3))
def test_claim_24_lambda_zero_deltas_telescope_to_r_minus_v_of_the_first_state(seed, vocab, cap):
    """On every response, sum_t A_t(lambda = 0) = R - V(s_0) for a random critic; GRPO's centered deltas
    give |o| (R - b) summed. Mutant: bootstrapping the last token from its own state's value
    (delta_{T-1} = r + V(s_{T-1}) - V(s_{T-1})) leaves V(s_{T-1}) in the sum."""
    toy = make_critic_toy(seed, vocab, cap)
    advantages, _ = toy.lab_gae(toy.critic, 0.0)
    first = toy.critic[0][:, 0].unsqueeze(-1)  # V(s_0), the empty prefix: float[batch 1]
    assert torch.allclose(advantages.sum(-1), toy.rewards - first, rtol=TOL.rtol, atol=1e-12)

    group = torch.arange(min(4, toy.rewards.shape[-1]))  # some responses as one prompt's group
    deltas = compute_deltas(toy.rewards[:, group], "centered")
    grpo = deltas.unsqueeze(-1) * toy.mask[:, group]  # every live token gets R - b
    lengths = toy.mask[:, group].sum(-1)
    assert torch.allclose(grpo.sum(-1), lengths * deltas)

    values = toy.on_responses(toy.critic)
    lengths = toy.mask.sum(-1, keepdim=True)
    last = torch.arange(toy.mask.shape[-1]) == lengths - 1
    following = torch.cat([values[..., 1:], torch.zeros_like(values[..., :1])], dim=-1)
    following = torch.where(last, values, following)  # the mutant's value after the last token
    mutant = (terminal_rewards(toy.rewards, toy.mask) + following - values) * toy.mask
    assert float((mutant.sum(-1) - (toy.rewards - first)).abs().max()) > TOL.differs


@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(2, 3), cap=st.integers(2, 3))
def test_claim_24_with_v_pi_each_delta_is_the_tokens_own_advantage(seed, vocab, cap):
    """With V = V^pi, delta_t = Q^pi(s_t, a_t) - V^pi(s_t) on every response and token (so also in
    expectation), and some response has tokens of different credit, which no advantage constant over the
    response matches. Mutant: GRPO's R - b with the prompt's value b = V^pi(s_0) (what the group mean
    estimates; not the least-variance constant of lesson 1) has E[R - b | s_t, a_t] = Q^pi(s_t, a_t) - V^pi(s_0), not the token's advantage."""
    toy = make_critic_toy(seed, vocab, cap)
    v_pi = exact_values.state_values(toy.policy, toy.prompts, toy.rewards)
    q_pi = exact_values.action_values(toy.policy, toy.prompts, toy.rewards)
    deltas, _ = toy.lab_gae(v_pi, 0.0)
    index = exact_values.prefix_index(toy.responses, vocab)
    per_token = torch.stack([q[:, index[:, t], toy.responses[:, t]] - v[:, index[:, t]]
                             for t, (q, v) in enumerate(zip(q_pi, v_pi))], dim=-1) * toy.mask
    assert torch.allclose(deltas, per_token, rtol=TOL.rtol, atol=1e-12)
    spread = torch.where(toy.mask, deltas, -torch.inf).amax(-1) - torch.where(toy.mask, deltas, torch.inf).amin(-1)
    assert float(spread.max()) > TOL.differs  # tokens of one response with different credit

    grpo = (toy.rewards - v_pi[0][:, :1]).unsqueeze(-1).expand(*toy.mask.shape)  # R - V^pi(s_0) on every token
    expected = given_state(toy, grpo)
    gaps = [float((e - (q - v.unsqueeze(-1))).abs().max()) for e, q, v in zip(expected[1:], q_pi[1:], v_pi[1:])]
    assert max(gaps) > TOL.differs
