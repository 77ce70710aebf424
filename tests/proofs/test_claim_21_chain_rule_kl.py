"""Claim 21 (docs/claims.md): for an autoregressive policy, per-token KL estimates summed over an
on-policy response estimate the sequence KL without bias (the chain rule); on a stale response not.

    KL(p || r) = sum_y p(y) log p(y)/r(y) = E_{y~p} sum_q KL(p(. | y_<q) || r(. | y_<q))

and E_{y_q ~ p(. | y_<q)}[k3] = E[k1] = KL(p(. | y_<q) || r(. | y_<q)) at every prefix (Schulman,
"Approximating KL Divergence"). Exact: `lab.exact.varlen` enumerates every response, EOS and
truncation included; padding after EOS carries no estimate.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

import lab.policies as P
from lab.exact import varlen as exact_varlen
from lab.core.kl import k3
from lab.policies.autoregressive import AutoregressivePolicy
from tests.proofs.proof_tools import TOL, close


def policies(seed, vocab, cap):
    make = lambda s: AutoregressivePolicy(vocab, 2, cap, 3, generator=torch.Generator().manual_seed(s)).double()  # noqa: E731
    return make(seed), make(seed + 1), make(seed + 2)  # pi_theta, pi_ref, a stale pi_old


@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(2, 3), cap=st.integers(1, 3))
def test_claim_21_summed_k3_and_k1_on_policy_are_unbiased_for_the_sequence_kl(seed, vocab, cap):
    """E_{y~pi_theta}[sum_q k3] = E[sum_q k1] = KL(pi_theta || pi_ref) over whole responses, exactly.
    Mutant: summing k3 over the padding after EOS as well (no mask) is biased."""
    policy, reference, _ = policies(seed, vocab, cap)
    prompts = torch.tensor([[0, 1], [1, 1]])
    kl = exact_varlen.sequence_kl(policy, reference, prompts)
    assert close(exact_varlen.expected_kl_estimate(policy, reference, prompts, "k3"), kl)
    assert close(exact_varlen.expected_kl_estimate(policy, reference, prompts, "k1"), kl)

    responses = exact_varlen.varlen_responses(vocab, cap).expand(2, -1, -1)
    unmasked = [torch.log_softmax(P.token_logits(p, prompts, responses), -1).gather(
        -1, responses.unsqueeze(-1)).squeeze(-1) for p in (policy, reference)]
    mutant = (exact_varlen.all_probs(policy, prompts) * k3(*unmasked).sum(-1)).sum(-1)
    if cap > 1:  # with a cap of one token there is no padding to leak
        assert not close(mutant, kl)


def test_claim_21_summed_k3_on_a_stale_response_is_biased():
    """Responses drawn from an older policy: E_{y~pi_old}[sum_q k3(pi_theta, pi_ref)] differs from
    KL(pi_theta || pi_ref) (claim 7's boundary, now for whole sequences)."""
    policy, reference, old = policies(0, 3, 3)
    prompts = torch.tensor([[0, 1], [2, 0]])
    kl = exact_varlen.sequence_kl(policy, reference, prompts)
    stale = exact_varlen.expected_kl_estimate(policy, reference, prompts, "k3", sampler=old)
    assert bool(((stale - kl).abs() > TOL.differs).all())
