"""Claim 19 (docs/claims.md): with responses of varying length, the GRPO paper's 1/|o| makes the
expected update point away from grad J; a constant divisor does not.

Source: Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective" (Dr. GRPO),
section 3 on the response-length bias of 1/|o_i|. Everything is exact: `lab.exact.varlen`
enumerates every response of the autoregressive policy (ended by EOS or truncated at the cap)
and every G-tuple of responses.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.exact import varlen as exact_varlen
from lab.exact.enumeration import flat_grad
from lab.policies.autoregressive import AutoregressivePolicy
from lab.policies.factorized import Policy
from tests.proofs.proof_tools import TOL, angle_deg, close

COUNTEREXAMPLE_ANGLE = 15.21
"""degrees between E[g] under seq-mean-token-mean and grad J in the counterexample below"""


def grad_j(policy, prompts, reward):
    """grad J per prompt by autograd of the exact J: float[batch params]."""
    J = exact_varlen.expected_reward(policy, prompts, reward, torch.float64)
    return torch.stack([flat_grad(J[b], policy) for b in range(len(prompts))])


def test_claim_19_with_varying_lengths_seq_mean_token_mean_is_not_a_positive_multiple_of_grad_j():
    """Autoregressive policy (V = 3, prompt [1,0,2], cap 4, dim 5, seed 5), inclusion-ordering
    reward, G = 4, leave-one-out deltas: the exact E[g] under seq-mean-token-mean is 15.21 degrees
    away from grad J, while at fixed length (the lecture's factorised model) the same aggregation
    is exactly grad J / L. Mutant: claiming the 1/|o| update is a multiple of grad J fails here.
    """
    prompts = torch.tensor([[1, 0, 2]])
    policy = AutoregressivePolicy(3, 3, 4, 5, generator=torch.Generator().manual_seed(5)).double()
    update = exact_varlen.expected_update(policy, prompts, "inclusion-ordering", "loo", "seq-mean-token-mean", 4)[0]
    target = grad_j(policy, prompts, "inclusion-ordering")[0]
    angle = angle_deg(update, target)
    assert abs(angle - COUNTEREXAMPLE_ANGLE) < 0.01
    mutant_scale = (update @ target) / (target @ target)  # the best positive multiple still misses
    assert float((update - mutant_scale * target).norm() / update.norm()) > TOL.differs

    lecture = Policy(3, 3, 3, 5, generator=torch.Generator().manual_seed(5)).double()
    fixed = exact_varlen.expected_update(lecture, prompts, "inclusion-ordering", "loo", "seq-mean-token-mean", 4)[0]
    assert close(fixed, grad_j(lecture, prompts, "inclusion-ordering")[0] / 3)


@st.composite
def varlen_toys(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    vocab, cap = draw(st.integers(2, 3)), draw(st.integers(1, 2))
    policy = AutoregressivePolicy(vocab, 2, cap, draw(st.integers(2, 3)),
                                  generator=torch.Generator().manual_seed(seed)).double()
    prompts = torch.randint(vocab, (1, 2), generator=torch.Generator().manual_seed(seed + 1))
    n = exact_varlen.space_size(vocab, cap)
    rewards = torch.randint(0, 4, (1, n), generator=torch.Generator().manual_seed(seed + 2)).double()
    return policy, prompts, rewards


@given(toy=varlen_toys(), group_size=st.integers(2, 3), extra=st.integers(0, 2))
def test_claim_19_a_constant_divisor_with_leave_one_out_deltas_is_exactly_grad_j_over_c(toy, group_size, extra):
    """seq-mean-token-sum-norm with leave-one-out deltas: E[g] = grad J / C exactly; with centered
    deltas E[g] = (G-1)/(G C) grad J (the group mean's shrinkage, claim 4), for any constant C.
    Enumerated over all G-tuples of responses. Mutant: leaving out the (G-1)/G factor fails.
    """
    policy, prompts, rewards = toy
    horizon = policy.max_length + extra
    target = grad_j(policy, prompts, rewards)
    loo = exact_varlen.expected_update(policy, prompts, rewards, "loo", "seq-mean-token-sum-norm", group_size,
                                       horizon=horizon, method="tuples")
    centered = exact_varlen.expected_update(policy, prompts, rewards, "centered", "seq-mean-token-sum-norm",
                                            group_size, horizon=horizon, method="tuples")
    assert close(loo, target / horizon)
    assert close(centered, (group_size - 1) / (group_size * horizon) * target)
    if float(target.norm()) > TOL.differs:
        assert not close(centered, target / horizon)  # the mutant
