"""lab.policies.fused: the one-node log-probs equal autograd through the plain path (lab.policies.factorized, lab.policies.sampling).

    log_probs = log_softmax((sum_p E[x_p] A_p) B_q E^T)[y],  with its backward written by hand.

The hand-written backward is only a speed path, so the claim is equality with the reference
`response_log_probs(policy_logits(...))`: in float64 to 1e-12 for value and every parameter's
gradient, with and without a run axis; and bitwise in float32 (the loop's runs keep their exact
trajectories; the loop of README "The experiment" is unchanged).
"""

import pytest
import torch

from lab.policies.fused import policy_log_probs
from lab.policies.factorized import init_parameters, policy_logits
from lab.policies.sampling import log_softmax, response_log_probs

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
    distinct prompt and response lengths (README "The experiment")."""
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
    so a run trains exactly as it did through autograd (tests/test_train.py compares the loop with a
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
    contiguous layout (the training loop, README "The experiment", is unchanged by where the numbers live)."""
    from lab.training.optim import RunAdam
    from lab.policies.factorized import PolicyStack

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
