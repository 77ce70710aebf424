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


def batch_factors(p_pass: list[float], G: int, length: int) -> list[float]:
    """c_b = (G / L) E[1 / (1 + B_b + K_others)] per prompt, B_b ~ Bin(G - 1, p_b) the rest of its own group kept,
    K_others ~ sum of Bin(G, p_b') the other prompts' kept responses: the lab's loss divides by the batch's kept
    tokens, all prompts together."""
    def binomial(n, p):
        return [math.comb(n, k) * p**k * (1 - p)**(n - k) for k in range(n + 1)]

    factors = []
    for b, p in enumerate(p_pass):
        others = [1.0]  # the distribution of the other prompts' kept count, one prompt convolved in at a time
        for q in p_pass[:b] + p_pass[b + 1:]:
            summed = [0.0] * (len(others) + G)
            for j, a in enumerate(others):
                for k, w in enumerate(binomial(G, q)):
                    summed[j + k] += a * w
            others = summed
        factors.append(G / length * sum(wb * wk / (1 + kb + kk) for kb, wb in enumerate(binomial(G - 1, p))
                                        for kk, wk in enumerate(others)))
    return factors


@given(seed=seeds, threshold=st.sampled_from([1.0, 2.0, 3.0]))
def test_claim_31_in_a_batch_of_prompts_each_prompt_gets_its_own_factor_from_the_batchs_kept_tokens(seed, threshold):
    """Two prompts, G = 2 responses each, every pair of groups enumerated: the lab's loss averages over the kept
    tokens of the whole batch, so E[grad loss] = -sum_b c_b grad P_b(R >= tau), c_b = (G / L) E[1 / (1 + B_b +
    K_others)] (`batch_factors`), one factor per prompt, and the update is not a multiple of grad sum_b P_b. Mutant:
    the one-prompt factor (G / L) E[1 / (1 + B_b)] for each prompt, the claim as it stood, fails wherever a prompt's
    responses can pass."""
    toy = make_toy(seed, vocab_size=2, length=2, batch=2)
    G, responses = 2, all_responses(toy.vocab_size, toy.length)  # int[n pos]
    probs = all_log_probs(toy.policy, toy.prompts).exp().detach()  # float[batch n]
    passes = (toy.rewards >= threshold).double()
    p_pass = (probs * passes).sum(-1)
    grads = [flat_grad((all_log_probs(toy.policy, toy.prompts)[b].exp() * passes[b]).sum(), toy.policy) for b in (0, 1)]
    groups = torch.cartesian_prod(*[torch.arange(len(responses))] * G)  # int[n^G G]: one prompt's group
    both = torch.stack(torch.meshgrid(torch.arange(len(groups)), torch.arange(len(groups)), indexing="ij"), -1)
    index = torch.stack([groups[both.view(-1, 2)[:, b]] for b in (0, 1)], 1)  # int[combos batch G]
    token = toy.policy(toy.prompts).log_softmax(-1)  # float[batch pos vocab], with gradient
    positions = torch.arange(toy.length)
    per_token = torch.stack([token[b][positions, responses[index[:, b]]] for b in (0, 1)], 1)  # float[combos batch G pos]
    keep = at_least(torch.stack([toy.rewards[b][index[:, b]] for b in (0, 1)], 1), threshold)  # float[combos batch G]
    weight = torch.stack([probs[b][index[:, b]].prod(-1) for b in (0, 1)], 1).prod(-1)  # P(the two groups)
    expected = flat_grad((weight * sft_loss(per_token, None, keep)).sum(), toy.policy)
    factors = batch_factors([float(p) for p in p_pass], G, toy.length)
    assert close(expected, -(factors[0] * grads[0] + factors[1] * grads[1]))
    one_prompt = [G / toy.length * sum(math.comb(G - 1, k) * float(p)**k * (1 - float(p))**(G - 1 - k) / (1 + k)
                                       for k in range(G)) for p in p_pass]
    if min(float(p) for p in p_pass) > 1e-9 and max(float(g.norm()) for g in grads) > 1e-6:
        assert not close(expected, -(one_prompt[0] * grads[0] + one_prompt[1] * grads[1]))


def test_claim_31_the_batch_factors_of_the_claims_example():
    """The claim's numbers: two prompts passing with probabilities 0.38 and 0.952, G = L = 2: c = 0.315 and 0.399
    (`batch_factors`, which the enumeration above proves), against the one-prompt formula's 0.810 and 0.524."""
    factors = batch_factors([0.38, 0.952], 2, 2)
    assert [round(c, 3) for c in factors] == [0.315, 0.399]
    assert [round(2 / 2 * (1 - p / 2), 3) for p in (0.38, 0.952)] == [0.81, 0.524]
