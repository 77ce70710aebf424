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


def fresh_batch_weights(demo: torch.Tensor, lengths: torch.Tensor, n: int) -> torch.Tensor:
    """w(y) = E[1 / (|y| + S_{n-1})], S_{n-1} the summed lengths of n - 1 other demonstrations drawn from pi_demo:
    float64[responses], from the length distribution convolved n - 1 times."""
    top = int(lengths.max())
    of_length = torch.zeros(top + 1, dtype=torch.float64).index_add_(0, lengths.long(), demo)  # P(|y| = l)
    others = torch.zeros(1, dtype=torch.float64)
    others[0] = 1.0  # S_0 = 0
    for _ in range(n - 1):
        others = torch.nn.functional.pad(others, (0, top)).unsqueeze(0)
        others = torch.stack([torch.roll(others[0], shift) * of_length[shift] for shift in range(top + 1)]).sum(0)
    total = torch.arange(len(others), dtype=torch.float64)
    return torch.stack([(others / (length + total)).sum() for length in lengths.double()])


def fixed_point(demo: torch.Tensor, lengths: torch.Tensor, n: int) -> torch.Tensor:
    """pi_demo(y) E[1 / (|y| + S_{n-1})], renormalised: the fixed point of the token mean over fresh batches of n."""
    weighted = demo * fresh_batch_weights(demo, lengths, n)
    return weighted / weighted.sum()


def expected_gradient(demo: torch.Tensor, lengths: torch.Tensor, z: torch.Tensor, n: int) -> torch.Tensor:
    """The gradient in the tabular logits z of E[sft_loss] over every batch of n demonstrations drawn from pi_demo:
    each batch is one leading index of the lab's `sft_loss`, a response's sequence log-prob on its first token and
    0 on its other live tokens (the loss sums them), its |y| tokens live in the mask."""
    z = z.clone().requires_grad_(True)
    log_pi = z.log_softmax(-1)
    batches = torch.cartesian_prod(*[torch.arange(len(demo))] * n).view(-1, n)  # int[batches n]
    width = int(lengths.max())
    per_token = torch.zeros(len(batches), 1, n, width, dtype=torch.float64)
    per_token = per_token.index_put((torch.arange(len(batches)).repeat_interleave(n), torch.zeros(len(batches) * n,
                                     dtype=torch.long), torch.arange(n).repeat(len(batches)),
                                     torch.zeros(len(batches) * n, dtype=torch.long)), log_pi[batches].flatten())
    mask = (torch.arange(width) < lengths[batches].unsqueeze(-1)).unsqueeze(1)  # bool[batches 1 n pos]
    weight = demo[batches].prod(-1)  # P(the batch)
    (gradient,) = torch.autograd.grad((weight * sft_loss(per_token, mask)).sum(), z)
    return gradient


@given(seed=seeds, n=st.integers(1, 3))
def test_claim_30_with_fresh_batches_of_variable_length_the_token_means_fixed_point_is_pi_demo_times_e_1_over_count(
        seed, n):
    """Fresh batches of n demonstrations from pi_demo, of variable length (`lab.exact.varlen`: vocabulary 2, up to 3
    tokens), each step's loss the lab's token mean over its batch: the batch's token count |y| + S_{n-1} comes with
    each demonstration, so the expected gradient vanishes at pi_demo(y) E[1 / (|y| + S_{n-1})], renormalised, not
    at pi_demo (the mutant: the claim as it stood, "the token mean keeps pi_demo"), unless every length is equal.
    At n = 1 it is pi_demo(y) / |y|, the per-sequence mean's fixed point. Every batch is enumerated, float64."""
    policy = make_policy("autoregressive", 2, 2, 3, 3, torch.Generator().manual_seed(seed)).double()
    lengths = varlen.lengths(policy)
    demo = demo_distribution(seed, 1, len(lengths))[0]
    moved = fixed_point(demo, lengths, n)
    assert close(expected_gradient(demo, lengths, moved.log(), n), torch.zeros_like(demo))
    assert not close(expected_gradient(demo, lengths, demo.log(), n), torch.zeros_like(demo))
    if n == 1:
        assert close(moved, demo / lengths / (demo / lengths).sum())


def test_claim_30_on_a_fixed_set_the_token_mean_keeps_the_sets_own_distribution():
    """The lab's `--loss sft` trains on one set drawn before training: its token count is a constant, so the loss is
    the set's NLL up to a factor and its fixed point, in the tabular class, is the set's empirical distribution,
    whatever the lengths. Mutant: the per-sequence mean moves it."""
    lengths = torch.tensor([1, 2, 3, 3])
    batch = torch.tensor([0, 0, 1, 2, 3, 3, 3])  # the fixed set: responses by index
    empirical = torch.bincount(batch, minlength=4).double() / len(batch)
    z = empirical.log().clone().requires_grad_(True)
    log_pi = z.log_softmax(-1)
    per_token = torch.zeros(1, len(batch), 3, dtype=torch.float64).index_put(
        (torch.zeros(len(batch), dtype=torch.long), torch.arange(len(batch)), torch.zeros(len(batch), dtype=torch.long)),
        log_pi[batch])
    mask = torch.arange(3) < lengths[batch].unsqueeze(-1)
    (gradient,) = torch.autograd.grad(sft_loss(per_token.unsqueeze(0), mask.unsqueeze(0)).sum(), z)
    assert close(gradient, torch.zeros(4, dtype=torch.float64))
    z = empirical.log().clone().requires_grad_(True)
    (mutant,) = torch.autograd.grad(-(z.log_softmax(-1)[batch] / lengths[batch]).mean(), z)
    assert not close(mutant, torch.zeros(4, dtype=torch.float64))


def test_claim_30_fresh_batches_fixed_point_approaches_pi_demo_as_the_batch_grows():
    """The claim's numbers: demonstrations that emit each of 5 tokens and EOS uniformly, up to 4 tokens (the
    lecture's autoregressive space, 781 responses; a policy with zero logits), KL(pi_demo || fixed point) is 0.157,
    0.031, 0.0059 and 0.0003 for fresh batches of 1, 2, 4 and 16. The fixed point's formula is the one the enumeration
    above proves. Mutant: a fixed point of pi_demo(y) / |y| at every n stays at 0.157."""
    uniform = make_policy("autoregressive", 5, 3, 4, 10, torch.Generator().manual_seed(0), 0.0).double()
    with torch.no_grad():
        demo = varlen.all_probs(uniform, torch.tensor([[0, 1, 2]]))[0]
    lengths = varlen.lengths(uniform)
    assert close(demo, (1 / 6) ** lengths.double())  # 1/6 per token drawn, EOS or not
    values = [float(kl(demo, fixed_point(demo, lengths, n).log())) for n in (1, 2, 4, 16)]
    assert [round(v, d) for v, d in zip(values, (3, 3, 4, 4))] == [0.157, 0.031, 0.0059, 0.0003]
    assert round(float(kl(demo, (demo / lengths / (demo / lengths).sum()).log())), 3) == 0.157
