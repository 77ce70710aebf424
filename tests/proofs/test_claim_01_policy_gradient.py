"""Claim 1 (docs/claims.md): the policy gradient is the reward-weighted score."""

import torch
from einops import einsum
from hypothesis import assume, given

from lab.exact.enumeration import all_log_probs, all_responses, position_log_probs, score_matrix
from tests.proofs.proof_tools import close, TOL, toys


@given(toy=toys(min_length=2, max_length=3, max_vocab=2))
def test_claim_01_policy_gradient_is_the_reward_weighted_score(toy):
    """grad J = E[R grad log pi(o|q)], and log pi(o|q) is the sum of the per-position log-probs.

    Claim 1 (docs/claims.md), from the GRPO textbook chapter. grad J comes from autograd of the exact J; the
    right side is the exact sum over every response. The mutant (log pi taken as the *mean* of
    the per-position log-probs, a per-token average) is rejected by the same check.
    """
    grad_j = toy.grad_j()
    scores = score_matrix(toy.policy, toy.prompts)  # float[batch n params]
    identity = einsum(toy.probs() * toy.rewards, scores, "batch n, batch n params -> batch params")
    assert close(identity, grad_j)

    table = position_log_probs(toy.policy, toy.prompts)  # float[batch pos vocab]
    responses = all_responses(toy.vocab_size, toy.length)  # int[n pos]
    summed = sum(table[:, q, responses[:, q]] for q in range(toy.length))  # float[batch n]
    assert close(all_log_probs(toy.policy, toy.prompts), summed)
    assert close(toy.probs().sum(-1), torch.ones(len(toy.prompts)))

    assume(grad_j.norm() > TOL.differs)
    mutant = identity / toy.length  # the score of the mean per-position log-prob
    assert not close(mutant, grad_j)
