"""Claim 22 (docs/claims.md): with the critic at V^pi, the expected GAE(lambda) advantage of a token is
its advantage Q^pi(s_t, a_t) - V^pi(s_t), for every lambda in [0, 1] (Schulman et al. 2016, GAE).

    delta_t = r_t + V(s_{t+1}) - V(s_t),   A_t = sum_l lambda^l delta_{t+l}   (gamma = 1, V = 0 after the end)

With V = V^pi, E[delta_{t+l} | s_t, a_t] = 0 for l >= 1 and delta_t = Q^pi(s_t, a_t) - V^pi(s_t) (the
transition to s_{t+1} is deterministic), so lambda weighs only terms of mean zero. Exact: the lab's
GAE (`lab.core.gae`) runs on every response of an autoregressive toy, and its average over the
responses through each (state, action) is compared with Q^pi - V^pi, Q^pi itself the enumerated
average of the reward there.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.core.gae import terminal_rewards
from lab.exact import values as exact_values
from tests.proofs.critic_tools import given_state, make_critic_toy
from tests.proofs.proof_tools import TOL


def forward_scan(deltas: torch.Tensor, mask: torch.Tensor, lam: float) -> torch.Tensor:
    """The mutant: lambda weighs the earlier deltas, A_t = sum_l lambda^l delta_{t-l} (the scan run the wrong way)."""
    running, out = torch.zeros_like(deltas[..., 0]), []
    for t in range(deltas.shape[-1]):
        running = (deltas[..., t] + lam * running) * mask[..., t]
        out.append(running)
    return torch.stack(out, dim=-1)


@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(2, 3), cap=st.integers(1, 3),
       lam=st.sampled_from([0.0, 0.3, 0.5, 0.9, 0.99, 1.0]))
def test_claim_22_with_v_pi_the_expected_gae_advantage_is_q_minus_v_for_every_lambda(seed, vocab, cap, lam):
    """E[A_t^lambda | s_t, a_t] = Q^pi(s_t, a_t) - V^pi(s_t) at every state and action, for every lambda,
    when the critic is V^pi. Mutant: the scan run forwards (lambda weighing earlier deltas) fails for
    lambda > 0 wherever a response has two tokens."""
    toy = make_critic_toy(seed, vocab, cap)
    v_pi = exact_values.state_values(toy.policy, toy.prompts, toy.rewards)
    q_pi = given_state(toy, toy.rewards.unsqueeze(-1).expand(*toy.mask.shape))  # E[R | s_t, a_t], enumerated
    advantages, _ = toy.lab_gae(v_pi, lam)
    expected = given_state(toy, advantages)
    for t in range(cap):
        want = q_pi[t] - v_pi[t].unsqueeze(-1)
        assert torch.allclose(expected[t], want, rtol=TOL.rtol, atol=1e-10)
        assert torch.allclose(exact_values.gae_advantages_exact(toy.policy, toy.prompts, toy.rewards, v_pi, lam)[t],
                              want, rtol=TOL.rtol, atol=1e-10)  # the recursion of lab.exact.values agrees

    values = toy.on_responses(v_pi)
    next_values = torch.cat([values[..., 1:], torch.zeros_like(values[..., :1])], dim=-1)
    deltas = (terminal_rewards(toy.rewards, toy.mask) + next_values - values) * toy.mask
    mutant = given_state(toy, forward_scan(deltas, toy.mask, lam))
    if lam > 0 and cap > 1:
        assert max(float((m - (q - v.unsqueeze(-1))).abs().max()) for m, q, v in zip(mutant, q_pi, v_pi)) > TOL.differs
