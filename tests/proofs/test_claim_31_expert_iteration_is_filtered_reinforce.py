"""Claim 31 (docs/claims.md): at theta = theta_old, expert iteration's expected update is the policy gradient of
P(F(R) = 1), the probability that a response passes its filter: filtered imitation is REINFORCE with the 0/1
reward F. With the filter `reward >= tau` and the lab's loss (`lab.core.sft.sft_loss`: the NLL averaged over the
kept responses' tokens, L per response), over a group of G samples

    E[grad loss] = -(G / L) E[1 / (1 + B)] grad P(F = 1),     B ~ Binomial(G - 1, P(F = 1))

a negative multiple of grad P: the kept count only rescales the step. With a normaliser that does not depend on
the samples (1 / (G L)) the factor is 1 / L.

CS336 assignment 5 (expert iteration); Williams (1992), REINFORCE, with the reward F(R); the factor is derived
here (given a kept response, the other G - 1 are kept independently with probability P). Exact: every group of G
responses is enumerated and weighted by its probability (`lab.exact.estimators.all_groups`), float64.
"""

import itertools
import math

import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.proofs.proof_tools import close, flat_grad, make_toy, seeds

from lab.core.sft import at_least, sft_loss
from lab.exact.enumeration import all_log_probs, all_responses


def expected_update(toy, prompt: int, threshold: float, G: int, weights_of) -> torch.Tensor:
    """E over every group of G responses to one prompt of grad sft_loss(the group, weights_of(its rewards))."""
    policy, prompts = toy.policy, toy.prompts[prompt:prompt + 1]
    responses = all_responses(toy.vocab_size, toy.length)  # int[n pos]
    probs = all_log_probs(policy, prompts)[0].exp().detach()  # float[n]
    rewards = toy.rewards[prompt]
    total = 0
    for group in itertools.product(range(len(responses)), repeat=G):
        index = torch.tensor(group)
        weight = probs[index].prod()
        token = policy(prompts).log_softmax(-1)[0]  # float[pos vocab], with gradient
        per_token = token.gather(-1, responses[index].T).T.unsqueeze(0).unsqueeze(0)  # float[1 1 G pos]
        keep = weights_of(rewards[index], threshold).unsqueeze(0).unsqueeze(0)  # float[1 1 G]
        total = total + weight * flat_grad(sft_loss(per_token, None, keep).sum(), policy)
    return total


@given(seed=seeds, G=st.integers(1, 3), threshold=st.sampled_from([1.0, 2.0, 3.0]))
def test_claim_31_expert_iterations_expected_update_is_a_negative_multiple_of_grad_p_pass(seed, G, threshold):
    """Enumerating every group: E[grad sft_loss on the kept] = -(G / L) E[1 / (1 + B)] grad P(R >= tau), B ~
    Bin(G - 1, P) (CS336 assignment 5; Williams 1992 with reward 1[R >= tau]). Mutant: keeping the responses
    that fail (1 - F, a filter keeping the worst) points the update the other way."""
    toy = make_toy(seed, vocab_size=2, length=2, batch=1)
    probs = all_log_probs(toy.policy, toy.prompts)[0].exp()
    passes = (toy.rewards[0] >= threshold).double()
    p_pass = (probs * passes).sum()
    grad_p = flat_grad(p_pass, toy.policy)
    p = float(p_pass.detach())
    mean_inverse = sum(math.comb(G - 1, b) * p**b * (1 - p)**(G - 1 - b) / (1 + b) for b in range(G))
    expected = expected_update(toy, 0, threshold, G, at_least)
    assert close(expected, -(G / toy.length) * mean_inverse * grad_p)

    worst = expected_update(toy, 0, threshold, G, lambda r, tau: 1 - at_least(r, tau))
    if float(grad_p.norm()) > 1e-6:
        assert not close(worst, expected)
        assert float(worst @ grad_p) > 0  # the loss's gradient along +grad P: a step lowers P(pass)


@given(seed=seeds, threshold=st.sampled_from([1.0, 2.0, 3.0]))
def test_claim_31_with_a_fixed_normaliser_filtered_imitation_is_reinforce_with_a_zero_one_reward(seed, threshold):
    """Per response, E_{y ~ pi}[F(R(y)) grad log pi(y)] = grad E[F(R)]: the score-function identity with the reward
    F = 1[R >= tau] (REINFORCE), so the NLL of the kept responses with the constant normaliser 1 / L has expected
    gradient -grad P(F = 1) / L. Mutant: weighting by the reward R itself (plain REINFORCE) gives grad E[R], not
    grad P(F = 1), wherever the filter is not an affine function of R."""
    toy = make_toy(seed, vocab_size=2, length=2, batch=1)
    log_pi = all_log_probs(toy.policy, toy.prompts)[0]
    passes = (toy.rewards[0] >= threshold).double()
    score_side = flat_grad((log_pi.exp().detach() * passes * log_pi).sum(), toy.policy)
    grad_p = flat_grad((log_pi.exp() * passes).sum(), toy.policy)
    assert close(score_side, grad_p)

    reinforce = flat_grad((log_pi.exp().detach() * toy.rewards[0] * log_pi).sum(), toy.policy)
    a, b = torch.linalg.lstsq(torch.stack([toy.rewards[0], torch.ones_like(passes)], 1), passes.unsqueeze(1)).solution
    affine = close(a * toy.rewards[0] + b, passes)  # F = a R + b: then grad P = a grad E[R]
    if not affine and float(grad_p.norm()) > 1e-6:
        assert not close(reinforce, grad_p)
