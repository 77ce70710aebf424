"""Claim 30 (docs/claims.md): SFT on demonstrations drawn from pi_demo minimises KL(pi_demo || pi_theta):

    L(theta) = E_{y ~ pi_demo}[-log pi_theta(y | x)] = H(pi_demo) + KL(pi_demo || pi_theta)

so in the tabular class (pi_theta = softmax(z) over every response) its only fixed point is pi_theta = pi_demo.
The lab's loss (`lab.core.sft.sft_loss`, TRL's token mean over the batch's completion tokens) has a denominator
that does not depend on theta, so it is L up to a positive constant and keeps that fixed point; averaging each
response by its own length instead moves the fixed point to pi_demo(y) / |y|, renormalised.

Maximum likelihood as forward-KL minimisation (Bishop 2006, section 1.6.1; CS336 assignment 5, SFT). Exact: every
expectation is a finite sum over the enumerated responses (`lab.exact.enumeration`, `lab.exact.varlen`), float64.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.proofs.proof_tools import close, make_toy, seeds

from lab.core.sft import sft_loss
from lab.exact import varlen
from lab.exact.enumeration import all_log_probs, all_responses
from lab.policies import make_policy


def demo_distribution(seed: int, batch: int, n: int) -> torch.Tensor:
    """A random full-support pi_demo over n responses per prompt: float64[batch n]."""
    weights = -torch.rand(batch, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).log()
    return weights / weights.sum(-1, keepdim=True)


def kl(p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    return (p * (p.log() - log_q)).sum(-1)


@given(seed=seeds, vocab=st.integers(2, 3), length=st.integers(1, 2))
def test_claim_30_the_sft_loss_is_the_demonstrations_entropy_plus_kl_from_pi_demo(seed, vocab, length):
    """E_{pi_demo}[-log pi_theta] = H(pi_demo) + KL(pi_demo || pi_theta) for a lab policy, and the lab's token-mean
    sft_loss weighted by pi_demo is that divided by the response length. Mutant: the reverse KL(pi_theta ||
    pi_demo) in place of the forward one breaks the identity."""
    toy = make_toy(seed, vocab, length)
    log_pi = all_log_probs(toy.policy, toy.prompts).detach()  # float[batch n]
    demo = demo_distribution(seed + 1, *log_pi.shape)
    nll = -(demo * log_pi).sum(-1)
    entropy = -(demo * demo.log()).sum(-1)
    assert close(nll, entropy + kl(demo, log_pi))
    # the lab's loss over every response, each weighted by pi_demo: the per-token log-probs of every response
    responses = all_responses(vocab, length)  # int[n pos]
    token = toy.policy(toy.prompts).log_softmax(-1).detach()  # float[batch pos vocab]
    per_token = token.unsqueeze(1).expand(-1, len(responses), -1, -1).gather(
        -1, responses.expand(len(toy.prompts), -1, -1).unsqueeze(-1)).squeeze(-1)  # float[batch n pos]
    lab = torch.stack([sft_loss(per_token[b:b + 1].unsqueeze(0), None, demo[b:b + 1].unsqueeze(0))[0]
                       for b in range(len(demo))])
    assert close(lab, nll / length)

    reverse = (log_pi.exp() * (log_pi - demo.log())).sum(-1)
    assert not close(nll, entropy + reverse)


@given(seed=seeds, n=st.integers(2, 6))
def test_claim_30_in_the_tabular_class_the_only_fixed_point_is_pi_demo(seed, n):
    """With pi_theta = softmax(z), grad_z L = pi_theta - pi_demo: zero at z = log pi_demo, and every other z has a
    loss higher by exactly KL(pi_demo || pi_theta) > 0. Mutant: the per-response length-averaged loss
    E[-log pi(y) / |y|] (lengths 1..n) is not stationary at pi_demo."""
    demo = demo_distribution(seed, 1, n)[0]
    z = demo.log().clone().requires_grad_(True)
    loss = -(demo * z.log_softmax(-1)).sum()
    (gradient,) = torch.autograd.grad(loss, z)
    assert close(gradient, torch.zeros(n, dtype=torch.float64))
    other = torch.randn(n, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    gap = -(demo * other.log_softmax(-1)).sum() - loss.detach()
    assert close(gap, kl(demo, other.log_softmax(-1)))
    assert float(gap) > 0

    lengths = torch.arange(1, n + 1, dtype=torch.float64)
    z = demo.log().clone().requires_grad_(True)
    (mutant,) = torch.autograd.grad(-(demo * z.log_softmax(-1) / lengths).sum(), z)
    assert not close(mutant, torch.zeros(n, dtype=torch.float64))


@given(seed=seeds)
def test_claim_30_the_token_mean_over_variable_lengths_keeps_pi_demo_the_per_sequence_mean_does_not(seed):
    """For the autoregressive policy's variable-length responses (`lab.exact.varlen`), the token mean over the
    batch is E[-log pi(y)] / E[|y|]: its denominator does not depend on theta, so it is stationary exactly where
    the sequence NLL is, at pi_demo (in the tabular class over those responses). The per-sequence mean
    E[-log pi(y) / |y|] has its fixed point at pi_demo(y) / |y| renormalised (the mutant of the lab's choice)."""
    policy = make_policy("autoregressive", 2, 2, 3, 3, torch.Generator().manual_seed(seed)).double()
    lengths = varlen.lengths(policy).double()  # |y| of every EOS-ended response, EOS included
    demo = demo_distribution(seed, 1, len(lengths))[0]
    z = demo.log().clone().requires_grad_(True)
    token_mean = -(demo * z.log_softmax(-1)).sum() / (demo * lengths).sum()
    (gradient,) = torch.autograd.grad(token_mean, z)
    assert close(gradient, torch.zeros_like(gradient))
    shifted = demo / lengths / (demo / lengths).sum()  # the per-sequence mean's fixed point
    z = shifted.log().clone().requires_grad_(True)
    (per_sequence,) = torch.autograd.grad(-(demo * z.log_softmax(-1) / lengths).sum(), z)
    assert close(per_sequence, torch.zeros_like(per_sequence))
    assert not close(shifted, demo)  # lengths differ, so the two fixed points do
