"""Claim 20 (docs/claims.md): under 1/|o| normalisation the expected update lengthens wrong
responses whose expected deltas are negative (and shortens right ones), relative to the unbiased
update; with positive deltas (raw partial-credit rewards) it shortens wrong responses instead.

Source: Liu et al. 2025, "Understanding R1-Zero-Like Training" (Dr. GRPO): with 1/|o_i|, a
response with negative advantage is pushed down by 1/|o_i| per token, so long wrong responses
are penalised less; one with positive advantage is pushed up less when long.

Shown exactly as directional derivatives. For f(theta) = E[|o| ; wrong] = sum_{y wrong} pi(y) |y|,
D_u f = grad f . u. The two updates are compared per unit of expected-reward gain, D_u f / D_u J,
so their sizes do not matter; with a 0/1 reward, J = P(right), so equal gains in J mean equal
changes of P(right) and P(wrong), and the difference is one of conditional lengths.
"""

import torch

from lab.exact import varlen as exact_varlen
from lab.exact.estimators import delta_moments
from lab.policies.autoregressive import AutoregressivePolicy

SEED, VOCAB, CAP, DIM, G = 3, 2, 3, 3, 4
"""The constructed case: a 2-token vocabulary, responses up to 3 tokens, one prompt [0]."""


def case():
    policy = AutoregressivePolicy(VOCAB, 1, CAP, DIM, generator=torch.Generator().manual_seed(SEED)).double()
    prompts = torch.tensor([[0]])
    responses = exact_varlen.varlen_responses(VOCAB, CAP)
    right = (responses[:, 0] == 0).double().unsqueeze(0)  # right: content starting with token 0 (lengths 2..3)
    return policy, prompts, right


def per_unit_of_j(policy, prompts, right, update):
    """(D_u E[|o| ; wrong], D_u E[|o| ; right]) / D_u J along update u float[params]."""
    scores, probs = exact_varlen.score_matrix(policy, prompts), exact_varlen.all_probs(policy, prompts).detach()
    size = exact_varlen.lengths(policy).double()
    gradients = [exact_varlen.expectation_gradient(scores, probs, table)[0]
                 for table in (right, (1 - right) * size, right * size)]
    gain = gradients[0] @ update
    assert float(gain) > 0  # both updates raise J
    return float(gradients[1] @ update / gain), float(gradients[2] @ update / gain)


def test_claim_20_one_over_length_raises_wrong_lengths_and_lowers_right_ones_relative_to_the_unbiased_update():
    """Leave-one-out deltas, G = 4. Unbiased: seq-mean-token-sum-norm (exactly grad J / C, claim 19);
    biased: seq-mean-token-mean. Per unit of J gained, E[|o| ; wrong] falls by 2.48 under the unbiased
    update but only by 1.66 under 1/|o| (wrong responses end up longer), and E[|o| ; right] rises
    by 2.80 against 2.72 (right responses end up shorter).
    Mutant: weighting sequences by |o| / C instead of 1 / |o| reverses both inequalities.
    """
    policy, prompts, right = case()
    unbiased = exact_varlen.expected_update(policy, prompts, right, "loo", "seq-mean-token-sum-norm", G)[0]
    biased = exact_varlen.expected_update(policy, prompts, right, "loo", "seq-mean-token-mean", G)[0]
    wrong_u, right_u = per_unit_of_j(policy, prompts, right, unbiased)
    wrong_b, right_b = per_unit_of_j(policy, prompts, right, biased)
    assert (round(wrong_u, 2), round(wrong_b, 2), round(right_u, 2), round(right_b, 2)) == (-2.48, -1.66, 2.80, 2.72)
    assert wrong_b > wrong_u and right_b < right_u

    probs = exact_varlen.all_probs(policy, prompts).detach()
    first = delta_moments(probs, right, "loo", G).first  # E[d_1 ; o_1 = y]
    size = exact_varlen.lengths(policy).double()
    mutant = (first * size / CAP)[0] @ exact_varlen.score_matrix(policy, prompts)[0]
    wrong_m, right_m = per_unit_of_j(policy, prompts, right, mutant)
    assert wrong_m < wrong_u and right_m > right_u  # the opposite bias


def _slope_differences(delta: str, init_scale: float, seeds: int = 10):
    """slope(1/|o|) - slope(C) per seed (`lab.experiments.length_oracle.Oracle.slopes`): the lecture's prompts and
    reward (inclusion-ordering, variable length), autoregressive policy, cap 5, G = 10, at initialisation."""
    from lab.experiments.length_oracle import Oracle
    from lab.training.config import TrainConfig
    from tasks.sorting import make_task

    configs = [TrainConfig(policy="autoregressive", delta=delta, loss_agg=agg, init_scale=init_scale, seed=seed)
               for agg in ("seq-mean-token-mean", "seq-mean-token-sum-norm") for seed in range(seeds)]
    slopes = Oracle(make_task(), configs).slopes()
    return slopes[:seeds] - slopes[seeds:]


def test_claim_20_reverse_case_with_raw_partial_credit_rewards_one_over_length_shortens_wrong_responses():
    """The condition of claim 20: 1/|o| multiplies each response's push by C/|o| relative to the constant
    divisor, so it favours the short responses whose push is up (expected delta > 0) and spares the short
    ones whose push is down (expected delta < 0). With raw deltas and the lab's partial-credit reward nearly
    every response's reward, hence its delta, is positive: per unit of expected reward gained, the 1/|o|
    update changes E[|o| | wrong] by less than the constant divisor's at initialisation, in 10 of 10 seeds
    and at both init scales (wrong responses get shorter). With centered deltas (negative for most wrong
    responses) at init scale 0.1 the sign is Dr. GRPO's, in 10 of 10 seeds.
    Mutant: a predicate that called the raw case 'lengthens' (slope difference > 0) fails on every seed."""
    for scale in (1.0, 0.1):
        assert (_slope_differences("raw", scale) < 0).all()
    assert (_slope_differences("centered", 0.1) > 0).all()


def test_claim_20_with_0_1_rewards_and_leave_one_out_deltas_the_direction_holds_across_random_policies():
    """The constructed family of the first test (vocabulary 2, prompt [0], cap 3, right = first token 0,
    G = 4), 30 random initialisations (seeds 0..29): with a 0/1 reward and leave-one-out deltas every wrong
    response's expected delta is -pi(y) J < 0, and the 1/|o| update raises E[|o| | wrong] more per unit of J
    than the constant divisor in 30 of 30. Not a theorem for every policy: it is the claim's condition."""
    responses = exact_varlen.varlen_responses(VOCAB, CAP)
    right = (responses[:, 0] == 0).double().unsqueeze(0)
    wrong, holds = 1 - right, 0
    for seed in range(30):
        policy = AutoregressivePolicy(VOCAB, 1, CAP, DIM, generator=torch.Generator().manual_seed(seed)).double()
        prompts = torch.tensor([[0]])
        scores, probs = exact_varlen.score_matrix(policy, prompts), exact_varlen.all_probs(policy, prompts).detach()
        size = exact_varlen.lengths(policy).double()
        p_wrong, mean_wrong = (probs * wrong).sum(), (probs * wrong * size).sum() / (probs * wrong).sum()
        grad = lambda table: exact_varlen.expectation_gradient(scores, probs, table)[0]  # noqa: E731
        conditional = (grad(wrong * size) - mean_wrong * grad(wrong)) / p_wrong  # grad E[|o| | wrong]
        slope = {agg: float(conditional @ u / (grad(right) @ u)) for agg, u in (
            (agg, exact_varlen.expected_update(policy, prompts, right, "loo", agg, G)[0])
            for agg in ("seq-mean-token-mean", "seq-mean-token-sum-norm"))}
        holds += slope["seq-mean-token-mean"] > slope["seq-mean-token-sum-norm"]
    assert holds == 30
