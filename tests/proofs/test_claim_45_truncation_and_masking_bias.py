"""Claim 45 (docs/claims.md): what truncating and masking the sequence weight leave of a sampler's bias, exactly.

With w(y) = pi(y) / mu(y), g_1(y) the on-policy update of response y (claim 44) and bounds [C_min, C_max]:

    truncate   E_mu[clamp(w) g_1] - E_pi[g_1] = sum_{w > C_max} (C_max mu - pi) g_1
                                              + sum_{w < C_min} (C_min mu - pi) g_1
    mask       E_mu[w [C_min <= w <= C_max] g_1] - E_pi[g_1] = - sum_{w outside} pi g_1

so truncation keeps every response and biases only those whose weight it clips (by the part of pi it cannot reach),
masking drops them whole (their entire on-policy term), and both are exact once the bounds contain every weight.
TRL 1.16's sequence modes (`vllm_importance_sampling_mode`); the derivation is the definition of each clip. Checked
over every response of random factorised policies in float64.
"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.exact.sampler_bias import response_tables, sampler_update


def case(seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, 2, 4, generator=g, dtype=torch.float64)
    stale = logits + torch.randn(1, 2, 4, generator=g, dtype=torch.float64)
    rewards = torch.randint(0, 4, (1, 16), generator=g).double()
    return torch.log_softmax(logits, -1), torch.log_softmax(stale, -1), rewards


def on_policy_terms(log_pi, rewards):
    """g_1(y) float[n pos vocab] (d = r, token mean over L) and pi(y)."""
    responses, token_pi = response_tables(log_pi)
    onehot = torch.nn.functional.one_hot(responses, log_pi.shape[-1]).double()
    g1 = (rewards[0] / log_pi.shape[-2]).view(-1, 1, 1) * (onehot - log_pi[0].exp())
    return g1, token_pi[0].sum(-1).exp()


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), low=st.floats(0.05, 0.9), high=st.floats(1.1, 4.0))
def test_claim_45_truncation_and_masking_leave_exactly_the_clipped_terms(seed, low, high):
    """Both identities to 1e-12. Mutant: the truncation identity with pi in place of C_max mu (as if truncation
    dropped the clipped responses) fails wherever some weight is clipped."""
    log_pi, log_mu, rewards = case(seed)
    g1, pi = on_policy_terms(log_pi, rewards)
    mu = response_tables(log_mu)[1][0].sum(-1).exp()
    w = pi / mu
    on_policy = (pi.view(-1, 1, 1) * g1).sum(0)
    above, below = w > high, w < low
    truncated = sampler_update(log_pi, log_mu, rewards, "sequence-truncate", low, high).mean[0]
    expected = (((high * mu - pi) * above + (low * mu - pi) * below).view(-1, 1, 1) * g1).sum(0)
    torch.testing.assert_close(truncated - on_policy, expected, rtol=0, atol=1e-12)
    masked = sampler_update(log_pi, log_mu, rewards, "sequence-mask", low, high).mean[0]
    dropped = (-(pi * (above | below)).view(-1, 1, 1) * g1).sum(0)
    torch.testing.assert_close(masked - on_policy, dropped, rtol=0, atol=1e-12)
    if (above | below).any() and expected.abs().max() > 1e-9:
        assert not torch.allclose(truncated - on_policy, dropped, rtol=0, atol=1e-12)  # the mutant
