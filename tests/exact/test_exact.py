"""The exact oracle (`lab.exact`, `lab.exact.estimators`) against independent brute force and Monte Carlo."""

import itertools
import math

import pytest
import torch
from einops import einsum
from hypothesis import given
from hypothesis import strategies as st

from tests.proofs.proof_tools import close, make_toy, toys

from lab.core.deltas import REWARD_MODES, DeltaMode, compute_deltas
from lab.exact.estimators import LINEAR_COEFFICIENTS, delta_moments, gradient_covariance, gradient_moments
from lab.exact.enumeration import (
    ExactLimits,
    all_log_probs,
    all_responses,
    exact_kl,
    expected_reward,
    flat_grad,
    position_log_probs,
    response_index,
    reward_table,
    score_matrix,
)
from lab.core.losses import compute_loss
from lab.policies.factorized import Policy
from lab.policies.sampling import response_log_probs, sample_responses
from tasks import sorting

MC_Z = 5.0
"""Monte Carlo checks accept a deviation of at most this many standard errors (fixed seeds)."""


def brute_force_expected_reward(policy, prompts, reference_reward):
    """J per prompt by a Python loop over every response, probabilities multiplied position by position."""
    logits = policy(prompts)
    values = []
    for b, prompt in enumerate(prompts.tolist()):
        probs = torch.softmax(logits[b], dim=-1)  # float[pos vocab]
        total = 0.0
        for response in itertools.product(range(policy.vocab_size), repeat=policy.response_length):
            p = math.prod(probs[q, y] for q, y in enumerate(response))
            total = total + p * reference_reward(prompt, list(response))
        values.append(total)
    return torch.stack(values)


@pytest.mark.parametrize("name", list(sorting.REFERENCES))
def test_expected_reward_and_its_gradient_match_brute_force_on_the_lecture_prompts(name):
    policy = Policy(5, 3, 3, generator=torch.Generator().manual_seed(5)).double()
    prompts = sorting.lecture_prompts()
    exact = expected_reward(policy, prompts, sorting.REWARDS[name])
    brute = brute_force_expected_reward(policy, prompts, sorting.REFERENCES[name])
    assert close(exact, brute)
    assert close(flat_grad(exact.sum(), policy), flat_grad(brute.sum(), policy))


@given(seed=st.integers(0, 2**31 - 1), vocab_size=st.integers(2, 4), length=st.integers(1, 3))
def test_expected_reward_matches_brute_force_on_random_policies(seed, vocab_size, length):
    generator = torch.Generator().manual_seed(seed)
    policy = Policy(vocab_size, length, length, dim=3, generator=generator).double()
    prompts = torch.randint(vocab_size, (2, length), generator=generator)
    exact = expected_reward(policy, prompts, sorting.inclusion_ordering_reward)
    brute = brute_force_expected_reward(policy, prompts, sorting.inclusion_ordering_reference)
    assert close(exact, brute)
    assert close(flat_grad(exact.sum(), policy), flat_grad(brute.sum(), policy))


def test_float64_is_used_when_asked_and_gradients_reach_the_float32_policy():
    policy = Policy(3, 2, 2, generator=torch.Generator().manual_seed(0))
    prompts = torch.tensor([[0, 2]])
    J = expected_reward(policy, prompts, sorting.distance_reward, dtype=torch.float64)
    assert J.dtype == torch.float64
    gradient = flat_grad(J.sum(), policy)
    assert gradient.dtype == torch.float32 and float(gradient.norm()) > 0
    assert torch.allclose(J.float(), expected_reward(policy, prompts, sorting.distance_reward), atol=1e-5)


def test_all_responses_enumerates_every_response_once_in_mixed_radix_order():
    responses = all_responses(3, 4)
    assert responses.shape == (81, 4)
    assert responses.tolist() == [list(r) for r in itertools.product(range(3), repeat=4)]
    assert torch.equal(response_index(responses, 3), torch.arange(81))


def test_a_response_space_past_the_limit_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match=r"vocab\^length <= 4096.*5\^6 = 15625"):
        all_responses(5, 6)
    policy = Policy(5, 6, 6, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="4096"):
        expected_reward(policy, torch.zeros(1, 6, dtype=torch.long), sorting.distance_reward)
    with pytest.raises(ValueError, match="past the limit"):
        delta_moments(torch.full((1, 9), 1 / 9), torch.arange(9.0).unsqueeze(0), "max", 5, method="tuples",
                      limits=ExactLimits(max_enumerated=1000))


def test_a_reward_table_is_accepted_and_a_wrong_shape_refused():
    policy = Policy(3, 2, 2, generator=torch.Generator().manual_seed(1)).double()
    prompts = torch.tensor([[0, 1], [2, 2]])
    table = reward_table(prompts, sorting.distance_reward, 3, 2)
    assert table.shape == (2, 9)
    assert close(expected_reward(policy, prompts, table.double()),
                 expected_reward(policy, prompts, sorting.distance_reward))
    with pytest.raises(ValueError, match=r"float\[batch n\]"):
        expected_reward(policy, prompts, table[:, :4])


@given(toy=toys(), G=st.integers(1, 4), mode=st.sampled_from(REWARD_MODES))
def test_closed_form_value_enumeration_and_tuple_enumeration_agree(toy, G, mode):
    """The closed form of the linear modes and the multiset enumeration against all n^G tuples."""
    if mode is not DeltaMode.raw and mode is not DeltaMode.max and G == 1:
        with pytest.raises(ValueError, match="at least 2"):
            delta_moments(toy.probs(), toy.rewards, mode, G)
        return
    reference = delta_moments(toy.probs(), toy.rewards, mode, G, method="tuples")
    methods = ["values"] + (["closed"] if mode in LINEAR_COEFFICIENTS else [])
    for method in methods:
        moments = delta_moments(toy.probs(), toy.rewards, mode, G, method=method)
        assert close(moments.first, reference.first) and close(moments.second, reference.second)


@given(seed=st.integers(0, 2**31 - 1), G=st.integers(1, 3), mode=st.sampled_from(REWARD_MODES))
def test_gradient_moments_match_a_direct_sum_over_every_group_of_responses(seed, G, mode):
    """E[g], Cov[g] and tr Cov[g] against g = (1/G) sum_i d_i s_{o_i} evaluated on every G-tuple."""
    if mode not in (DeltaMode.raw, DeltaMode.max) and G == 1:
        G = 2
    toy = make_toy(seed, vocab_size=2, length=2, batch=1, integer_rewards=seed % 2 == 0)
    scores = score_matrix(toy.policy, toy.prompts)[0]  # float[n params]
    probs, rewards = toy.probs()[0], toy.rewards[0]
    mean = torch.zeros(scores.shape[1], dtype=torch.float64)
    second = torch.zeros(scores.shape[1], scores.shape[1], dtype=torch.float64)
    for group in itertools.product(range(len(probs)), repeat=G):
        index = torch.tensor(group)
        g = einsum(compute_deltas(rewards[index], mode), scores[index], "trial, trial params -> params") / G
        mean += probs[index].prod() * g
        second += probs[index].prod() * torch.outer(g, g)
    covariance = second - torch.outer(mean, mean)
    moments = gradient_moments(toy.policy, toy.prompts, toy.rewards, mode, G)
    assert close(moments.mean[0], mean)
    assert torch.allclose(moments.trace_cov[0], covariance.trace(), rtol=1e-8, atol=1e-10)
    assert torch.allclose(gradient_covariance(toy.policy, toy.prompts, toy.rewards, mode, G)[0], covariance,
                          rtol=1e-8, atol=1e-10)


def test_the_naive_loss_gradient_is_minus_the_estimator_over_batch_and_length():
    """grad compute_loss(naive) = -(1 / (batch L)) sum_b g_b on any sampled batch."""
    toy = make_toy(3, vocab_size=3, length=2, batch=2)
    logits = toy.policy(toy.prompts)
    responses = sample_responses(logits, 4, toy.generator)  # int[batch trial pos]
    deltas = torch.randn(responses.shape[:-1], generator=toy.generator, dtype=torch.float64)
    loss_gradient = flat_grad(compute_loss(response_log_probs(logits, responses), deltas, "naive"), toy.policy)
    scores = score_matrix(toy.policy, toy.prompts)  # float[batch n params]
    picked = torch.stack([scores[b, response_index(responses[b], 3)] for b in range(2)])  # float[batch trial params]
    g = einsum(deltas, picked, "batch trial, batch trial params -> batch params") / 4
    assert close(loss_gradient, -g.sum(0) / (2 * 2))


def test_exact_expected_gradient_agrees_with_monte_carlo_within_five_standard_errors():
    """E[g] of the (nonlinear) normalized estimator vs 20000 sampled groups, projected on grad J."""
    toy = make_toy(11, vocab_size=3, length=2, batch=1)
    G, groups = 3, 20000
    moments = gradient_moments(toy.policy, toy.prompts, toy.rewards, "normalized", G)
    direction = moments.grad_j[0] / moments.grad_j[0].norm()
    scores = score_matrix(toy.policy, toy.prompts)[0] @ direction  # float[n]: each score projected
    logits = toy.policy(toy.prompts)
    responses = sample_responses(logits, groups * G, torch.Generator().manual_seed(0))[0].view(groups, G, 2)
    index = response_index(responses, 3)  # int[groups G]
    projected = (compute_deltas(toy.rewards[0][index], "normalized") * scores[index]).mean(-1)  # float[groups]
    standard_error = projected.std() / math.sqrt(groups)
    assert abs(float(projected.mean() - moments.mean[0] @ direction)) < MC_Z * float(standard_error)


@given(toy=toys())
def test_exact_kl_is_the_sequence_kl_summed_over_positions(toy):
    """sum_y pi(y) log(pi(y) / ref(y)) over whole responses = sum over positions of the per-position KL."""
    reference = make_toy(toy.generator.initial_seed() + 7, toy.vocab_size, toy.length, toy.prompts.shape[1],
                         dim=toy.policy.dim)
    log_p, log_r = all_log_probs(toy.policy, toy.prompts), all_log_probs(reference.policy, toy.prompts)
    sequence_kl = (log_p.exp() * (log_p - log_r)).sum(-1)
    per_position = exact_kl(position_log_probs(toy.policy, toy.prompts),
                            position_log_probs(reference.policy, toy.prompts))
    assert close(per_position.sum(-1), sequence_kl)
    assert bool((per_position >= -1e-12).all())


def test_expected_reward_takes_a_reward_name_and_list_prompts():
    """`expected_reward(policy, [[1,0,2]], "distance")` is the same number as with the function and a tensor."""
    from lab.policies.factorized import Policy
    from lab.exact.enumeration import expected_reward
    from tasks.sorting import distance_reward

    policy = Policy(5, 3, 3, generator=torch.Generator().manual_seed(3))
    by_name = expected_reward(policy, [[1, 0, 2], [3, 2, 4]], "distance")
    by_function = expected_reward(policy, torch.tensor([[1, 0, 2], [3, 2, 4]]), distance_reward)
    assert torch.equal(by_name, by_function)
    with pytest.raises(ValueError, match="choose one of"):
        expected_reward(policy, [[1, 0, 2]], "no-such-reward")


def test_the_critic_mode_has_no_delta_moments():
    """gae's advantages come from a learned critic: the group estimator's moments refuse it, naming where its
    exact moments are (lab.exact.critic_moments)."""
    toy = make_toy(0)
    with pytest.raises(ValueError, match="critic_moments"):
        delta_moments(toy.probs(), toy.rewards, DeltaMode.gae, 2)
