"""Claim 41 (docs/claims.md): masking truncated responses (`--mask-truncated-completions`, DAPO's overlong
filtering) takes their terms out of the expected update, their deltas still made from the whole group; on claim
20's case it lengthens wrong responses relative to keeping them, under every aggregation: per unit of J gained,
E[|o| ; wrong] falls by 2.210 instead of 2.478 (constant divisor C), 1.125 instead of 1.662 (1/|o|) and 1.855
instead of 2.362 (token-mean).

Source: DAPO (arXiv 2503.14476), section 3.4 (overlong filtering: truncated samples are masked from the loss);
TRL `mask_truncated_completions`; claim 20's setting and measure (Dr. GRPO, arXiv 2503.20783). Exact: every
response of the autoregressive policy and every group of G = 4 enumerated (lab/exact/varlen.py).
"""

import torch

from tests.proofs.test_claim_20_length_bias_direction import CAP, G, VOCAB, case, per_unit_of_j

from lab.exact import varlen as exact_varlen

AGGREGATIONS = ("seq-mean-token-sum-norm", "seq-mean-token-mean", "token-mean")


def test_claim_41_masking_drops_exactly_the_truncated_responses_terms():
    """The masked expected update equals the enumeration over all 15^4 groups with each truncated response's weight
    set to 0 (its deltas unchanged), by both of varlen's paths (delta moments and tuples) for the per-sequence
    aggregations; 8 of the 15 responses are truncated. Mutant: masking the responses that end with EOS instead
    changes the update and fails."""
    policy, prompts, right = case()
    responses = exact_varlen.varlen_responses(VOCAB, CAP)
    truncated = ~(responses == VOCAB).any(dim=-1)
    assert int(truncated.sum()) == 8 and len(responses) == 15
    for agg in AGGREGATIONS[:2]:
        moments = exact_varlen.expected_update(policy, prompts, right, "loo", agg, G, mask_truncated=True)
        tuples = exact_varlen.expected_update(policy, prompts, right, "loo", agg, G, method="tuples",
                                              mask_truncated=True)
        torch.testing.assert_close(moments, tuples, rtol=0, atol=1e-12)
        full = exact_varlen.expected_update(policy, prompts, right, "loo", agg, G)
        assert not torch.allclose(moments, full, atol=1e-6)
    scores = exact_varlen.score_matrix(policy, prompts)[0]
    masked = exact_varlen.expected_update(policy, prompts, right, "loo", "seq-mean-token-sum-norm", G,
                                          mask_truncated=True)[0]
    probs = exact_varlen.all_probs(policy, prompts).detach()
    from lab.exact.estimators import delta_moments

    first = delta_moments(probs, right, "loo", G).first[0]  # E[d_1 ; o_1 = y], from every response's reward
    by_hand = (first * G / (G * CAP) * (~truncated).double()) @ scores
    torch.testing.assert_close(masked, by_hand, rtol=0, atol=1e-12)
    mutant = (first * G / (G * CAP) * truncated.double()) @ scores
    assert not torch.allclose(masked, mutant, atol=1e-6)


def test_claim_41_masking_lengthens_wrong_responses_relative_to_keeping_them():
    """Per unit of J: (D_u E[|o| ; wrong] with the mask, without it) for each aggregation, to 1e-3; the masked one is
    the larger in each. Mutant: 'masking shortens wrong responses' fails all three."""
    policy, prompts, right = case()
    found = {}
    for agg in AGGREGATIONS:
        pair = [per_unit_of_j(policy, prompts, right, exact_varlen.expected_update(
            policy, prompts, right, "loo", agg, G, mask_truncated=m)[0])[0] for m in (True, False)]
        found[agg] = pair
        assert pair[0] > pair[1]
    stated = {"seq-mean-token-sum-norm": (-2.210, -2.478), "seq-mean-token-mean": (-1.125, -1.662),
              "token-mean": (-1.855, -2.362)}
    for agg, pair in stated.items():
        assert all(abs(a - b) < 1e-3 for a, b in zip(found[agg], pair)), (agg, found[agg])
