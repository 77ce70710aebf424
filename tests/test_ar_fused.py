"""The autoregressive policy's fused log-probs (lab/policies/ar_fused.py) against the plain path:
teacher_forced_logits then masked_log_probs, in value and gradient, with and without a run axis."""

import pytest
import torch

import lab.policies as P
from lab.policies.ar_fused import ar_log_probs


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
