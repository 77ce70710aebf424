"""Claim 44 (docs/claims.md): responses from a sampler mu != pi bias the expected update; the sequence weight
pi(y) / mu(y) removes the bias exactly, the per-token weights pi_t / mu_t do not.

At the first step (pi_old = pi) one response's update in logits is g(y) = (d(y) / L) sum_t W_t(y) (e_{y_t} - pi_t)
(lab.exact.sampler_bias). With W = 1, E_mu[g] weighs responses by mu: biased. With the sequence weight W_t = pi(y) /
mu(y), E_mu[g] = sum_y pi(y) g_1(y) = the on-policy update (importance sampling). A token weight pi_t(y_t) /
mu_t(y_t) corrects only its own position's marginal; the delta depends on the other positions too, so the bias stays
(the token modes of TRL's `vllm_importance_sampling_mode` trade this for their lower variance). Source: importance
sampling (Kahn and Marshall 1953); truncated IS for mismatched samplers, Yao et al. (2025, "Your efficient RL
framework secretly brings you off-policy RL training"). Checked exactly over every response of random factorised
policies in float64.
"""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.exact.sampler_bias import relative_bias, sampler_update


def policies(seed, shift):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 3, 3, generator=g, dtype=torch.float64)
    stale = logits + shift * torch.randn(2, 3, 3, generator=g, dtype=torch.float64)
    rewards = torch.randint(0, 4, (2, 27), generator=g).double()
    return torch.log_softmax(logits, -1), torch.log_softmax(stale, -1), rewards


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), shift=st.floats(0.3, 1.5), baseline=st.booleans())
def test_claim_44_sequence_weights_are_unbiased_and_token_weights_are_not(seed, shift, baseline):
    """Unbounded sequence weights: relative bias < 1e-10 (raw deltas and deltas with the exact baseline). The
    uncorrected sampler and the per-token weights are biased: checked on a fixed counterexample (seed 0), where both
    exceed 1e-2. Mutant: the sequence weight mu / pi (inverted) is biased."""
    log_pi, log_mu, rewards = policies(seed, shift)
    on_policy = sampler_update(log_pi, log_pi, rewards, baseline=baseline).mean
    weighted = sampler_update(log_pi, log_mu, rewards, "sequence-truncate", None, math.inf, baseline=baseline).mean
    assert relative_bias(weighted, on_policy).max() < 1e-10
    inverted = sampler_update(log_mu, log_pi, rewards, "sequence-truncate", None, math.inf, baseline=baseline)
    assert relative_bias(inverted.mean, on_policy).max() > 1e-6 or shift < 1e-3  # the mutant


def test_claim_44_counterexample_uncorrected_and_token_weights_stay_biased():
    log_pi, log_mu, rewards = policies(0, 1.0)
    on_policy = sampler_update(log_pi, log_pi, rewards).mean
    for correction in (None, "token-truncate"):
        update = sampler_update(log_pi, log_mu, rewards, correction, None, math.inf).mean
        assert relative_bias(update, on_policy).min() > 1e-2, correction
