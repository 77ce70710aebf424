"""Exact moments of the GAE estimator and of the group estimators for either policy
(lab/exact/critic_moments.py), against plain loops over every response.

    G = 1:  E[g] = sum_y pi(y) h(y),  tr Cov[g] = sum_y pi(y) |h(y)|^2 - |E[g]|^2,  h(y) = grad sum_t A_t log pi(y_t | s_t)
"""

import pytest
import torch

import lab.policies as P
from lab.exact import critic_moments, estimators, values, varlen
from lab.exact.enumeration import flat_grad
from lab.policies.autoregressive import AutoregressivePolicy
from lab.policies.factorized import Policy


def seeded(seed):
    return torch.Generator().manual_seed(seed)


def ar_toy(seed=0, vocab=2, cap=2):
    policy = AutoregressivePolicy(vocab, 2, cap, 3, generator=seeded(seed)).double()
    prompts = torch.tensor([[0, 1], [1, 1]])
    rewards = torch.rand(2, varlen.space_size(vocab, cap), generator=seeded(seed + 1), dtype=torch.float64) * 3
    critic = [torch.randn(2, vocab ** t, generator=seeded(seed + 2 + t), dtype=torch.float64) for t in range(cap)]
    return policy, prompts, rewards, critic


@pytest.mark.parametrize("lam", [0.0, 0.7, 1.0])
def test_gae_moments_match_the_plain_sum_over_responses(lam):
    policy, prompts, rewards, critic = ar_toy()
    rows = varlen.varlen_responses(2, 2)
    probs = varlen.all_probs(policy, prompts).detach()
    advantages = critic_moments.response_advantages(policy, prompts, rewards, critic, lam)
    for group_size in (1, 3):
        got = critic_moments.gae_moments(policy, prompts, rewards, critic, lam, group_size)
        for b in range(2):
            log_probs = P.token_log_probs(policy, prompts[b:b + 1], rows.unsqueeze(0))[0]  # float[n pos]
            h = torch.stack([flat_grad((advantages[b, i] * log_probs[i]).sum(), policy) for i in range(len(rows))])
            mean = (probs[b].unsqueeze(-1) * h).sum(0)
            trace = ((probs[b] * (h ** 2).sum(-1)).sum() - (mean ** 2).sum()) / group_size
            torch.testing.assert_close(got.mean[b], mean, rtol=1e-9, atol=1e-12)
            assert float(got.trace_cov[b]) == pytest.approx(float(trace), rel=1e-9)


@pytest.mark.parametrize("kind", ["factorized", "autoregressive"])
def test_a_zero_critic_at_lambda_one_is_the_raw_estimator_and_lambda_one_is_unbiased(kind):
    if kind == "factorized":
        policy, prompts = Policy(3, 2, 2, 3, generator=seeded(4)).double(), torch.tensor([[0, 1], [2, 2]])
        rewards = torch.rand(2, 9, generator=seeded(5), dtype=torch.float64)
        zero, some = torch.zeros(2, dtype=torch.float64), torch.tensor([0.4, -0.2], dtype=torch.float64)
    else:
        policy, prompts, rewards, some = ar_toy(3, 2, 3)
        zero = [torch.zeros_like(c) for c in some]
    raw = critic_moments.group_moments(policy, prompts, rewards, "raw", 4)
    gae = critic_moments.gae_moments(policy, prompts, rewards, zero, 1.0, 4)
    torch.testing.assert_close(gae.mean, raw.mean, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(gae.trace_cov, raw.trace_cov, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(critic_moments.gae_moments(policy, prompts, rewards, some, 1.0, 4).mean, raw.grad_j,
                               rtol=1e-9, atol=1e-12)  # any critic at lambda = 1: E[g] = grad J (claim 23)


def test_group_moments_agree_with_the_factorised_estimator_moments():
    policy, prompts = Policy(3, 2, 2, 3, generator=seeded(7)).double(), torch.tensor([[0, 1], [2, 2]])
    rewards = torch.randint(0, 4, (2, 9), generator=seeded(8)).double()
    for mode in ("centered", "normalized"):
        want = estimators.gradient_moments(policy, prompts, rewards, mode, 3)
        got = critic_moments.group_moments(policy, prompts, rewards, mode, 3)
        torch.testing.assert_close(got.mean, want.mean, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(got.trace_cov, want.trace_cov, rtol=1e-9, atol=1e-12)


def test_the_critic_at_v_pi_has_less_variance_than_no_critic():
    """Not a theorem for every policy (the best constant baseline weighs by |score|^2), but on this toy the
    exact V^pi lowers tr Cov[g] below the zero critic's, and the exact numbers say so."""
    policy, prompts, rewards, _ = ar_toy(11, 2, 3)
    truth = values.state_values(policy, prompts, rewards)
    with_critic = critic_moments.gae_moments(policy, prompts, rewards, truth, 1.0, 1).trace_cov
    without = critic_moments.gae_moments(policy, prompts, rewards, [torch.zeros_like(t) for t in truth], 1.0, 1)
    assert bool((with_critic < without.trace_cov).all())
