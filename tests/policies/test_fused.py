"""The fused log-prob nodes of both policies against the plain autograd path.

lab.policies.fused: the one-node log-probs equal autograd through the plain path (lab.policies.factorized, lab.policies.sampling).

    log_probs = log_softmax((sum_p E[x_p] A_p) B_q E^T)[y],  with its backward written by hand.

The hand-written backward is only a speed path, so the claim is equality with the reference
`response_log_probs(policy_logits(...))`: in float64 to 1e-12 for value and every parameter's
gradient, with and without a run axis; and bitwise in float32 (the loop's runs keep their exact
trajectories; the loop of docs/task.md is unchanged).

The autoregressive policy's fused log-probs (lab/policies/ar_fused.py) against the plain path:
teacher_forced_logits then masked_log_probs, in value and gradient, with and without a run axis.
"""

import pytest
import torch

import lab.policies as P
from lab.policies.ar_fused import ar_log_probs
from lab.policies.factorized import init_parameters, policy_logits
from lab.policies.fused import policy_log_probs
from lab.policies.sampling import log_softmax, response_log_probs

pytestmark = pytest.mark.crosspath  # .ci/run runs these under other CPU kernel sets too

TIGHT = dict(rtol=1e-12, atol=1e-12)
"""float64 agreement: the two paths differ only in the order of a few roundings."""


def parameters(runs: int | None, vocab: int, prompt_length: int, response_length: int, dim: int,
               dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    """E, encode, decode of one policy (runs None) or `runs` stacked ones, requiring gradients."""
    drawn = [init_parameters(vocab, prompt_length, response_length, dim, torch.Generator().manual_seed(seed + r))
             for r in range(runs or 1)]
    names = ("embedding", "encode", "decode")
    stacked = [torch.stack([p[n] for p in drawn]) for n in names]
    if runs is None:
        stacked = [t[0] for t in stacked]
    return [t.to(dtype).requires_grad_() for t in stacked]


def both_paths(params, prompts, responses, weights):
    """Value and gradients of sum(weights * log_probs) through the plain path and the fused one."""
    plain = response_log_probs(policy_logits(*params, prompts), responses)
    fused, fused_log_softmax = policy_log_probs(*params, prompts, responses)
    grads = [torch.autograd.grad((weights * lp).sum(), params) for lp in (plain, fused)]
    return plain, fused, fused_log_softmax, grads


@pytest.mark.parametrize("runs", [None, 1, 4])
@pytest.mark.parametrize("shape", [(5, 3, 3, 10, 10), (7, 2, 4, 3, 1), (2, 4, 1, 6, 5)],
                         ids=["lecture", "longer-response", "one-position"])
def test_fused_log_probs_and_gradients_equal_autograd_through_the_plain_path(runs, shape):
    """Value and gradient (of a loss with arbitrary per-token weights, so every path of the backward
    is used) agree to 1e-12 in float64, for one policy and for R stacked ones, and for shapes with
    distinct prompt and response lengths (docs/task.md)."""
    vocab, prompt_length, response_length, dim, trials = shape
    params = parameters(runs, vocab, prompt_length, response_length, dim, torch.float64, seed=3)
    g = torch.Generator().manual_seed(11)
    lead = () if runs is None else (runs,)
    prompts = torch.randint(vocab, (3, prompt_length), generator=g)
    # repeated prompt tokens and repeated trials: the backward must add their gradients up
    prompts[0, 0] = prompts[0, -1]
    responses = torch.randint(vocab, (*lead, 3, trials, response_length), generator=g)
    weights = torch.randn(*lead, 3, trials, response_length, generator=g, dtype=torch.float64)
    plain, fused, fused_log_softmax, (plain_grads, fused_grads) = both_paths(params, prompts, responses, weights)
    assert fused.shape == plain.shape == (*lead, 3, trials, response_length)
    torch.testing.assert_close(fused, plain, **TIGHT)
    torch.testing.assert_close(fused_log_softmax, log_softmax(policy_logits(*params, prompts)), **TIGHT)
    assert not fused_log_softmax.requires_grad  # returned for metrics only
    for name, a, b in zip(("embedding", "encode", "decode"), fused_grads, plain_grads):
        assert a.abs().max() > 0, f"{name}: no gradient reached it"
        torch.testing.assert_close(a, b, **TIGHT, msg=f"{name} gradient")


def test_fused_path_is_bitwise_the_plain_path_in_float32():
    """The loop uses the fused path; its log-probs and gradients are the plain path's to the last bit,
    so a run trains exactly as it did through autograd (tests/training/test_train.py compares the loop with a
    plain reimplementation)."""
    params = parameters(6, 5, 3, 3, 10, torch.float32, seed=0)
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(5, (3, 3), generator=g)
    responses = torch.randint(5, (6, 3, 10, 3), generator=g)
    weights = torch.randn(6, 3, 10, 3, generator=g)
    plain, fused, _, (plain_grads, fused_grads) = both_paths(params, prompts, responses, weights)
    assert torch.equal(fused, plain)
    for a, b in zip(fused_grads, plain_grads):
        assert torch.equal(a, b)


def test_fused_path_refuses_prompts_per_run():
    """It is written for prompts shared by every run (int[batch pos]), as the loop has them."""
    params = parameters(2, 5, 3, 3, 4, torch.float32, seed=0)
    with pytest.raises(ValueError, match="shared by every run"):
        policy_log_probs(*params, torch.zeros(2, 3, 3, dtype=torch.long), torch.zeros(2, 3, 2, 3, dtype=torch.long))


def test_policy_stack_layout_gives_the_same_log_probs_gradients_and_adam_steps():
    """PolicyStack keeps decode in memory as [run dim pos dim] (so no product copies it) and RunAdam views
    each parameter in its memory order: values, gradients and Adam's steps are bitwise those of the
    contiguous layout (the training loop, docs/task.md, is unchanged by where the numbers live)."""
    from lab.policies.factorized import PolicyStack
    from lab.training.optim import RunAdam

    generators = lambda: [torch.Generator().manual_seed(s) for s in range(3)]  # noqa: E731
    stack = PolicyStack(5, 3, 3, 10, generators())
    assert not stack.decode.is_contiguous() and stack.decode.transpose(1, 2).is_contiguous()
    contiguous = [p.detach().clone(memory_format=torch.contiguous_format).requires_grad_()
                  for p in (stack.embedding, stack.encode, stack.decode)]
    stacked = [stack.embedding, stack.encode, stack.decode]
    g = torch.Generator().manual_seed(2)
    prompts = torch.randint(5, (3, 3), generator=g)
    responses = torch.randint(5, (3, 3, 10, 3), generator=g)
    weights = torch.randn(3, 3, 10, 3, generator=g)
    optimizers = [RunAdam(params, torch.tensor([1e-2, 3e-2, 1e-1])) for params in (stacked, contiguous)]
    for _ in range(3):
        for params, optimizer in zip((stacked, contiguous), optimizers):
            optimizer.zero_grad()
            (weights * policy_log_probs(*params, prompts, responses)[0]).sum().backward()
            optimizer.step()
        for a, b in zip(stacked, contiguous):
            assert a.grad.stride() == a.stride()  # the gradient has the parameter's layout
            assert torch.equal(a.grad, b.grad) and torch.equal(a, b)


def setup(runs, vocab=4, prompt_length=3, length=4, dim=5, batch=3, trials=6, seed=0):
    generators = [torch.Generator().manual_seed(seed + r) for r in range(runs or 1)]
    policy = (P.make_stack("autoregressive", vocab, prompt_length, length, dim, generators) if runs
              else P.make_policy("autoregressive", vocab, prompt_length, length, dim, generators[0]))
    policy = policy.double()
    g = torch.Generator().manual_seed(seed + 100)
    prompts = torch.randint(0, vocab, (batch, prompt_length), generator=g)
    responses = P.sample(policy, prompts, trials, generators if runs else generators[0])
    return policy, prompts, responses


@pytest.mark.parametrize("runs", [0, 1, 3])
def test_fused_autoregressive_log_probs_and_gradients_equal_the_plain_path(runs):
    policy, prompts, responses = setup(runs)
    mask = P.response_mask(policy, responses)
    assert (~mask).any() and mask.any()  # some responses end early: padding is exercised
    weights = torch.randn(responses.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    params = [policy.embedding, policy.encode, policy.decode, policy.previous]

    plain = P.token_log_probs(policy, prompts, responses)
    plain_grads = torch.autograd.grad((plain * weights).sum(), params)
    fused, entropy = ar_log_probs(*params, prompts, responses, mask)
    fused_grads = torch.autograd.grad((fused * weights).sum(), params)

    torch.testing.assert_close(fused, plain, rtol=0, atol=1e-12)
    reference = torch.log_softmax(P.token_logits(policy, prompts, responses), dim=-1)
    plain_entropy = -(reference.exp() * reference).sum(dim=-1)
    # live positions only: at padding, which nothing reads, the fused node leaves out the earlier EOS tokens
    torch.testing.assert_close(entropy[mask], plain_entropy[mask], rtol=0, atol=1e-12)
    assert torch.isfinite(entropy).all() and (entropy[mask] > 0).all()
    for name, a, b in zip(["embedding", "encode", "decode", "previous"], fused_grads, plain_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=name)
    assert (fused_grads[3] * (1 - torch.ones(4, 4).tril(-1)[..., None, None].double()) == 0).all()


def test_fused_autoregressive_log_probs_refuse_per_run_prompts():
    policy, prompts, responses = setup(2)
    with pytest.raises(ValueError, match="shared by every run"):
        ar_log_probs(policy.embedding, policy.encode, policy.decode, policy.previous,
                     prompts.expand(2, *prompts.shape), responses, P.response_mask(policy, responses))


def test_the_stack_stores_decode_and_previous_as_the_fused_path_reads_them():
    """The fused op reads decode as [run d (q e)] and previous as [run d (j q e)]; the stack keeps them in
    that memory order, so both are views (no copy per step) and their gradients arrive in the parameters'
    own layout (autograd keeps them as they are), while the values stay those of a contiguous stack."""
    from lab.training.optim import memory_order
    policy, prompts, responses = setup(3)
    assert memory_order(policy.decode) == [0, 2, 1, 3]
    assert memory_order(policy.previous) == [0, 3, 2, 1, 4]
    params = [policy.embedding, policy.encode, policy.decode, policy.previous]
    log_probs, _ = ar_log_probs(*params, prompts, responses, P.response_mask(policy, responses))
    log_probs.sum().backward()
    for p in params:
        assert p.grad.stride() == p.stride()
    generators = [torch.Generator().manual_seed(r) for r in range(3)]
    plain = [P.make_policy("autoregressive", 4, 3, 4, 5, g) for g in generators]
    stack = P.make_stack("autoregressive", 4, 3, 4, 5, [torch.Generator().manual_seed(r) for r in range(3)])
    for name in ("decode", "previous"):
        assert torch.equal(getattr(stack, name), torch.stack([getattr(p, name) for p in plain]))


def test_the_stack_layout_gives_the_same_log_probs_gradients_and_adam_steps():
    """The speed path (decode and previous stored permuted, RunAdam stepping them in memory order) against
    the plain one (the same parameters contiguous): bitwise the same log-probs, gradients and Adam steps."""
    from lab.training.optim import RunAdam
    policy, prompts, responses = setup(3)
    mask = P.response_mask(policy, responses)
    stored = [policy.embedding, policy.encode, policy.decode, policy.previous]
    assert not policy.decode.is_contiguous() and not policy.previous.is_contiguous()
    contiguous = [p.detach().clone(memory_format=torch.contiguous_format).requires_grad_() for p in stored]
    weights = torch.randn(responses.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    optimizers = [RunAdam(params, torch.tensor([1e-2, 3e-2, 1e-1])) for params in (stored, contiguous)]
    for _ in range(3):
        for params, optimizer in zip((stored, contiguous), optimizers):
            optimizer.zero_grad()
            (weights * ar_log_probs(*params, prompts, responses, mask)[0]).sum().backward()
            optimizer.step()
        for a, b in zip(stored, contiguous):
            assert a.grad.stride() == a.stride()  # the gradient has the parameter's layout: no copy
            assert torch.equal(a.grad, b.grad) and torch.equal(a, b)


@pytest.mark.parametrize("length", [1, 2])
def test_fused_log_probs_at_the_shortest_lengths(length):
    """With one position no earlier token reaches a later one (the previous-token table is empty); with
    two, only the first reaches the second."""
    policy, prompts, responses = setup(2, length=length)
    mask = P.response_mask(policy, responses)
    params = [policy.embedding, policy.encode, policy.decode, policy.previous]
    plain = P.token_log_probs(policy, prompts, responses)
    fused, _ = ar_log_probs(*params, prompts, responses, mask)
    torch.testing.assert_close(fused, plain, rtol=0, atol=1e-12)
    for a, b in zip(torch.autograd.grad(fused.sum(), params), torch.autograd.grad(plain.sum(), params)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
