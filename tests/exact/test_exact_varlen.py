"""Exact enumeration for variable-length responses (lab/exact/varlen.py)."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import lab.policies as P
from lab.exact import enumeration as exact, estimators, varlen as exact_varlen
from lab.core.aggregation import LossAgg
from lab.core.deltas import compute_deltas
from lab.exact.enumeration import ExactLimits
from lab.exact.estimators import EnumerationTooLarge
from lab.core.losses import compute_loss
from lab.policies.autoregressive import AutoregressivePolicy
from lab.policies.factorized import Policy

AGGS = [m.value for m in LossAgg]


def seeded(seed):
    return torch.Generator().manual_seed(seed)


def toy(seed, vocab=2, max_length=3, dim=3):
    return AutoregressivePolicy(vocab, 2, max_length, dim, generator=seeded(seed)).double()


def test_every_response_once_ended_by_eos_or_truncated():
    responses = exact_varlen.varlen_responses(3, 3)
    assert len(responses) == exact_varlen.space_size(3, 3) == 1 + 3 + 9 + 27
    assert len({tuple(r) for r in responses.tolist()}) == len(responses)
    mask = P.ar_model.response_mask(responses, 3)
    assert bool((responses[~mask] == 3).all())  # padding after EOS
    assert responses[:4].tolist() == [[3, 3, 3], [0, 3, 3], [1, 3, 3], [2, 3, 3]]
    with pytest.raises(ValueError, match="at most 4096 responses"):
        exact_varlen.varlen_responses(5, 6)


@given(seed=st.integers(0, 2**31), vocab=st.integers(1, 3), max_length=st.integers(1, 3))
def test_probabilities_sum_to_one_and_grad_j_is_the_score_sum(seed, vocab, max_length):
    policy = toy(seed, vocab, max_length)
    prompts = torch.randint(vocab, (2, 2), generator=seeded(seed + 1))
    rewards = torch.rand(2, exact_varlen.space_size(vocab, max_length), generator=seeded(seed + 2), dtype=torch.float64)
    probs = exact_varlen.all_probs(policy, prompts)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    scores = exact_varlen.score_matrix(policy, prompts)
    J = exact_varlen.expected_reward(policy, prompts, rewards)
    for b in range(2):
        torch.testing.assert_close(exact_varlen.expectation_gradient(scores, probs.detach(), rewards)[b],
                                   exact.flat_grad(J[b], policy), rtol=1e-9, atol=1e-12)


def test_a_factorized_policy_through_the_generic_oracle_is_lab_exact():
    policy = Policy(3, 2, 2, 3, generator=seeded(0)).double()
    prompts = torch.tensor([[0, 1], [2, 2]])
    torch.testing.assert_close(exact_varlen.all_log_probs(policy, prompts), exact.all_log_probs(policy, prompts))
    torch.testing.assert_close(exact_varlen.score_matrix(policy, prompts), exact.score_matrix(policy, prompts))
    torch.testing.assert_close(exact_varlen.expected_reward(policy, prompts, "distance"),
                               exact.expected_reward(policy, prompts, "distance"))
    reference = Policy(3, 2, 2, 3, generator=seeded(1)).double()
    torch.testing.assert_close(exact_varlen.sequence_kl(policy, reference, prompts),
                               exact.sequence_kl(policy, reference, prompts, torch.float64))


@given(seed=st.integers(0, 2**31), max_length=st.integers(1, 3))
def test_the_chain_rule_kl_is_the_sequence_kl(seed, max_length):
    policy, reference = toy(seed, 2, max_length), toy(seed + 1, 2, max_length)
    prompts = torch.tensor([[0, 1], [1, 1]])
    kl = exact_varlen.sequence_kl(policy, reference, prompts)
    torch.testing.assert_close(exact_varlen.chain_rule_kl(policy, reference, prompts), kl, rtol=1e-10, atol=1e-12)
    assert bool((kl > 0).all())


def test_the_gradient_of_the_labs_loss_on_one_group_is_the_documented_estimator():
    """For every aggregation and a fixed group, -grad compute_loss(..., agg, mask) equals
    sum_i w_i d_i s_{o_i} with the weights of the exact_varlen docstring: the oracle's estimator is
    the loss the lab trains with."""
    policy = toy(11, 3, 3)
    prompts = torch.tensor([[2, 0]])
    responses = exact_varlen.varlen_responses(3, 3)
    picks = torch.tensor([0, 2, 5, 39, 39])  # lengths 1, 2, 3, 3, 3 (EOS, c1 EOS, c1 c2 EOS, truncated twice)
    group = responses[picks].unsqueeze(0)  # int[batch trial pos]
    rewards = torch.tensor([[0.0, 2.0, 1.0, 3.0, 3.0]], dtype=torch.float64)
    deltas = compute_deltas(rewards, "loo")
    scores = exact_varlen.score_matrix(policy, prompts)[0, picks]  # float[trial params]
    size = P.response_lengths(policy, group)[0].double()
    weights = {"token-mean": 1 / size.sum().expand(5), "seq-mean-token-mean": 1 / (5 * size),
               "seq-mean-token-sum": torch.full((5,), 1 / 5.0, dtype=torch.float64),
               "seq-mean-token-sum-norm": torch.full((5,), 1 / (5 * 4.0), dtype=torch.float64)}
    for agg in AGGS:
        loss = compute_loss(P.token_log_probs(policy, prompts, group), deltas, "naive", agg=agg,
                            mask=P.response_mask(policy, group), horizon=4)
        torch.testing.assert_close(-exact.flat_grad(loss, policy), (weights[agg] * deltas[0]) @ scores,
                                   rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("delta", ["raw", "centered", "normalized", "max", "loo"])
def test_moments_and_tuple_enumeration_give_the_same_expected_update(agg, delta):
    policy = toy(5, 2, 2)
    prompts = torch.tensor([[0, 1], [1, 0]])
    auto = exact_varlen.expected_update(policy, prompts, "inclusion-ordering", delta, agg, 3)
    tuples = exact_varlen.expected_update(policy, prompts, "inclusion-ordering", delta, agg, 3, method="tuples")
    torch.testing.assert_close(auto, tuples, rtol=1e-9, atol=1e-12)
    assert float(auto.norm()) > 1e-6


@pytest.mark.parametrize("delta", ["raw", "centered", "loo"])
def test_at_fixed_length_the_expected_updates_are_lab_estimators_scaled(delta):
    """A factorised policy (length L): seq-mean-token-sum is estimators' E[g]; token-mean and
    seq-mean-token-mean are E[g] / L; the normalised sum E[g] / C."""
    policy = Policy(2, 2, 2, 3, generator=seeded(4)).double()
    prompts = torch.tensor([[0, 1]])
    mean = estimators.gradient_moments(policy, prompts, "distance", delta, 3).mean
    scale = {"token-mean": 1 / 2, "seq-mean-token-mean": 1 / 2, "seq-mean-token-sum": 1.0,
             "seq-mean-token-sum-norm": 1 / 5}
    for agg in AGGS:
        got = exact_varlen.expected_update(policy, prompts, "distance", delta, agg, 3, horizon=5)
        torch.testing.assert_close(got, scale[agg] * mean, rtol=1e-9, atol=1e-12)


def test_enumerations_past_the_limit_are_refused():
    policy = toy(0, 2, 2)
    with pytest.raises(EnumerationTooLarge, match="past the limit"):
        exact_varlen.expected_update(policy, torch.tensor([[0, 1]]), "distance", "loo", "token-mean", 4,
                                     limits=ExactLimits(max_enumerated=1000))
