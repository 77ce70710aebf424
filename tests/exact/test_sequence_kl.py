"""The exact KL between two policies' whole-response distributions (lessons 3 and 5).

`lab.exact.sequence_kl` for the factorised policy against the enumerated response distributions, and
the prefix recursion (lab/exact/prefix_tree.py) for the autoregressive policy against enumeration over
every response (lab.exact.varlen.sequence_kl), per run of a stack too.
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.exact.enumeration import all_log_probs, sequence_kl
from lab.exact.prefix_tree import TreeLevels, prefix_log_softmaxes, tree_kl, tree_pass, varlen_response_probs
from lab.exact.varlen import sequence_kl as varlen_sequence_kl
from lab.policies.factorized import Policy
import lab.policies as P

TOLERANCE = 1e-10
"""float64 sums over at most 5^3 = 125 responses."""


@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(2, 5), length=st.integers(1, 3))
def test_sequence_kl_is_the_kl_of_the_enumerated_response_distributions(seed, vocab, length):
    """sum_y pi(y) (log pi(y) - log ref(y)) over every response equals the sum of per-position KLs."""
    generator = torch.Generator().manual_seed(seed)
    policy, reference = (Policy(vocab, length, length, dim=4, generator=generator) for _ in range(2))
    prompts = torch.randint(vocab, (3, length), generator=generator)
    log_pi = all_log_probs(policy, prompts, torch.float64)  # float[batch n]
    log_ref = all_log_probs(reference, prompts, torch.float64)
    brute_force = (log_pi.exp() * (log_pi - log_ref)).sum(-1)
    assert torch.allclose(sequence_kl(policy, reference, prompts, torch.float64), brute_force, atol=TOLERANCE)


def test_sequence_kl_is_zero_for_a_policy_and_itself_and_positive_otherwise():
    policy = Policy(5, 3, 3, generator=torch.Generator().manual_seed(5))
    other = Policy(5, 3, 3, generator=torch.Generator().manual_seed(6))
    prompts = torch.tensor([[1, 0, 2], [3, 2, 4], [1, 2, 3]])
    assert torch.equal(sequence_kl(policy, policy, prompts, torch.float64), torch.zeros(3, dtype=torch.float64))
    assert (sequence_kl(policy, other, prompts, torch.float64) > 0).all()


def test_prefix_recursion_kl_is_the_enumerated_sequence_kl():
    prompts = torch.tensor([[0, 2, 1], [3, 3, 0]])
    policy = P.make_policy("autoregressive", 4, 3, 4, 5, torch.Generator().manual_seed(0)).double()
    reference = P.make_policy("autoregressive", 4, 3, 4, 5, torch.Generator().manual_seed(1)).double()
    params = lambda m: dict(m.named_parameters())  # noqa: E731
    with torch.no_grad():
        fast = tree_kl(prefix_log_softmaxes(params(policy), prompts), prefix_log_softmaxes(params(reference), prompts))
        same = tree_kl(prefix_log_softmaxes(params(policy), prompts), prefix_log_softmaxes(params(policy), prompts))
    torch.testing.assert_close(fast, varlen_sequence_kl(policy, reference, prompts), rtol=1e-10, atol=1e-12)
    assert (fast > 0.01).all() and (same == 0).all()


def test_prefix_recursion_kl_keeps_the_run_axis():
    prompts = torch.tensor([[0, 2, 1]])
    stacks = [P.make_stack("autoregressive", 4, 3, 4, 5, [torch.Generator().manual_seed(s + k) for s in (0, 5)])
              for k in (0, 1)]
    with torch.no_grad():
        levels = [prefix_log_softmaxes(dict(s.named_parameters()), prompts) for s in stacks]
        kl = tree_kl(*levels)  # float[run batch]
        for run in range(2):
            one = varlen_sequence_kl(stacks[0].unstack(run).double(), stacks[1].unstack(run).double(), prompts)
            torch.testing.assert_close(kl[run].double(), one, rtol=1e-4, atol=1e-6)


def test_the_loops_one_pass_over_the_tree_equals_the_plain_functions():
    prompts = torch.tensor([[0, 2, 1], [3, 3, 0]])
    stacks = [P.make_stack("autoregressive", 4, 3, 4, 5, [torch.Generator().manual_seed(s + k) for s in (0, 5)])
              for k in (0, 1)]
    params = [{name: p.double() for name, p in s.named_parameters()} for s in stacks]
    with torch.no_grad():
        levels, ref = (prefix_log_softmaxes(p, prompts) for p in params)
        fast_levels, kl, probs = tree_pass(params[0], prompts, TreeLevels.of(ref))
        _, zero, _ = tree_pass(params[0], prompts, None)
        _, fast_kl, _ = tree_pass(params[0], prompts, tree_pass(params[1], prompts, None)[0])
    torch.testing.assert_close(fast_kl, tree_kl(levels, ref), rtol=1e-10, atol=1e-12)
    assert fast_levels.prefixes[-1].shape[-3] == 1  # the fast path ran: factored, not whole levels
    for fast, plain in zip(fast_levels.log_softmaxes(), levels):
        torch.testing.assert_close(fast, plain, rtol=0, atol=1e-12)
    torch.testing.assert_close(kl, tree_kl(levels, ref), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(torch.cat(probs, -1), varlen_response_probs(levels), rtol=1e-10, atol=1e-14)
    assert (zero == 0).all() and (kl > 0.01).all()


def test_the_one_pass_falls_back_to_a_stable_pass_where_its_normalisers_underflow():
    """With logits spread by hundreds (an embedding scaled by 30), the factored softmax's normalisers
    underflow in float32; the pass then gives the plain functions' finite values, not NaN."""
    prompts = torch.tensor([[0, 2, 1], [3, 3, 0]])
    stacks = [P.make_stack("autoregressive", 4, 3, 4, 5, [torch.Generator().manual_seed(s + k) for s in (0, 5)],
                           init_scales=[30.0, 30.0]) for k in (0, 1)]
    params = [dict(s.named_parameters()) for s in stacks]
    with torch.no_grad():
        levels, ref = (prefix_log_softmaxes(p, prompts) for p in params)
        spread = max((lv.amax(-1) - lv.amin(-1)).max().item() for lv in levels)
        fast_levels, kl, probs = tree_pass(params[0], prompts, TreeLevels.of(ref))
    assert spread > 200
    assert torch.isfinite(kl).all() and torch.isfinite(torch.cat(probs, -1)).all()
    torch.testing.assert_close(kl, tree_kl(levels, ref))
    torch.testing.assert_close(torch.cat(probs, -1), varlen_response_probs(levels))
    for fast, plain in zip(fast_levels.log_softmaxes(), levels):
        torch.testing.assert_close(fast, plain)


@pytest.mark.parametrize("scale, path", [(2.186, "factored"), (2.206, "stable")])
@pytest.mark.parametrize("reference_kind", ["factored", "whole levels"])
def test_the_one_pass_stays_finite_where_a_normaliser_is_small(scale, path, reference_kind):
    """Near underflow in float32 (init scale 2.186 here: a normaliser of 1e-38, just above the smallest
    normal float), s = P(u | x) / total reaches 1e37, and sums of s times exp(prefix) alone would pass
    the largest float (inf, then 0 * inf = NaN); the joints stay below 1, and so the KL is finite, for
    either form of reference. At 2.206 a normaliser (3e-39) is below it: the stable pass takes over.
    Against float64, to float32's accuracy at logits near 90 (about 1e-5)."""
    prompts = torch.randint(0, 4, (6, 3), generator=torch.Generator().manual_seed(0))

    def params(scale, dtype=torch.float32):
        stack = P.make_stack("autoregressive", 4, 3, 4, 6, [torch.Generator().manual_seed(4)], init_scales=[scale])
        return {name: p.detach().to(dtype) for name, p in stack.named_parameters()}

    with torch.no_grad():
        ref_levels = prefix_log_softmaxes(params(2.0), prompts)
        reference = (tree_pass(params(2.0), prompts, None)[0] if reference_kind == "factored"
                     else TreeLevels.of(ref_levels))
        levels, kl, probs = tree_pass(params(scale), prompts, reference)
        exact = [prefix_log_softmaxes(params(s, torch.float64), prompts) for s in (scale, 2.0)]
    assert (levels.prefixes[-1].shape[-3] == 1) == (path == "factored")  # the factored form, or whole levels
    assert torch.isfinite(kl).all()
    torch.testing.assert_close(kl.double(), tree_kl(*exact), rtol=1e-3, atol=3e-5)
    torch.testing.assert_close(torch.cat(probs, -1).double(), varlen_response_probs(exact[0]), rtol=1e-3, atol=1e-6)


def test_the_one_pass_with_one_prompt_and_no_run_axis():
    prompts = torch.tensor([[2, 0, 1]])
    policy, reference = (P.make_policy("autoregressive", 3, 3, 3, 4, torch.Generator().manual_seed(s)).double()
                         for s in (0, 1))
    params = [dict(m.named_parameters()) for m in (policy, reference)]
    with torch.no_grad():
        levels, ref = (prefix_log_softmaxes(p, prompts) for p in params)
        _, kl, probs = tree_pass(params[0], prompts, tree_pass(params[1], prompts, None)[0])
    torch.testing.assert_close(kl, varlen_sequence_kl(policy, reference, prompts), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(torch.cat(probs, -1), varlen_response_probs(levels), rtol=1e-10, atol=1e-14)
