"""Claim 17 (docs/claims.md): std normalisation reweights prompts (Dr. GRPO's difficulty bias).

Per group, normalized deltas are the centered deltas times 1 / (std + eps), so a group's whole
contribution to the gradient is scaled by that weight. On the lecture's three prompts at the
lecture's initialisation, the exact expected updates show which prompt gains weight.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.core.deltas import compute_deltas
from lab.exact.estimators import gradient_moments
from lab.exact.enumeration import all_probs, reward_table
from lab.policies.factorized import Policy
from tasks import sorting

LECTURE_SEED, LECTURE_DIM, LECTURE_G = 5, 10, 10
"""The lecture's initialisation (seed 5, dim 10) and group size (docs/task.md)."""


@given(rows=st.lists(st.lists(st.integers(0, 5), min_size=5, max_size=5), min_size=1, max_size=4),
       std_eps=st.sampled_from([0.0, 1e-5, 1e-2]))
def test_claim_17_std_normalization_scales_each_group_by_one_over_its_std(rows, std_eps):
    """normalized deltas = centered deltas / (std + eps) in every group with any spread: each
    prompt's group enters the update with weight 1 / (std + eps) relative to centered deltas.

    Claim 17 (docs/claims.md; Dr. GRPO, Liu et al. 2025), first half.
    """
    r = torch.tensor(rows, dtype=torch.float64)
    varied = r.amax(-1) > r.amin(-1)
    weight = 1 / (r.std(dim=-1, keepdim=True) + std_eps)
    expected = compute_deltas(r, "centered") * weight
    normalized = compute_deltas(r, "normalized", std_eps=std_eps)
    assert torch.allclose(normalized[varied], expected[varied], rtol=1e-12, atol=1e-12)
    assert torch.equal(normalized[~varied], torch.zeros_like(normalized[~varied]))


def prompt_weights(policy, prompts, mode):
    """Exact weight of each prompt's expected update relative to centered deltas: float[batch].

    w_b = <E[g_mode], E[g_centered]> / |E[g_centered]|^2 (1 for centered itself).
    """
    reward = sorting.inclusion_ordering_reward
    mode_mean = gradient_moments(policy, prompts, reward, mode, LECTURE_G).mean
    centered_mean = gradient_moments(policy, prompts, reward, "centered", LECTURE_G).mean
    return (mode_mean * centered_mean).sum(-1) / (centered_mean**2).sum(-1)


def inversely_ordered(weights, spreads):
    """Whether the prompt with less reward spread always has the strictly larger weight."""
    order = torch.argsort(spreads)
    return bool((weights[order][:-1] > weights[order][1:]).all())


def test_claim_17_on_the_lecture_prompts_the_prompt_with_least_reward_spread_weighs_most():
    """On the lecture's prompts [[1,0,2],[3,2,4],[1,2,3]] at initialisation (seed 5, dim 10,
    inclusion-ordering, G = 10), the exact expected update under normalized deltas weighs each
    prompt more the smaller its reward spread (std of R under the policy) is: less spread, more weight.

    Claim 17 (docs/claims.md; Dr. GRPO's difficulty bias, Liu et al. 2025). Mutant: centered (and leave-one-out)
    deltas give every prompt the same weight, and fail the same ordering check.
    """
    prompts = sorting.lecture_prompts()
    policy = Policy(sorting.LECTURE_VOCAB_SIZE, 3, 3, dim=LECTURE_DIM,
                    generator=torch.Generator().manual_seed(LECTURE_SEED))
    probs = all_probs(policy, prompts, torch.float64).detach()
    rewards = reward_table(prompts, sorting.inclusion_ordering_reward, sorting.LECTURE_VOCAB_SIZE, 3).double()
    mean = (probs * rewards).sum(-1)
    spread = ((probs * rewards**2).sum(-1) - mean**2).sqrt()  # exact std of R per prompt
    assert len(set(spread.tolist())) == 3

    weights = prompt_weights(policy, prompts, "normalized")
    assert inversely_ordered(weights, spread)
    least, most = int(spread.argmin()), int(spread.argmax())
    assert float(weights[least] / weights[most]) > 1.2  # a visible reweighting, not rounding

    for unweighted in ("centered", "loo"):
        assert not inversely_ordered(prompt_weights(policy, prompts, unweighted), spread)
