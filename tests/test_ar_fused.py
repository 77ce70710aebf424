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
    fused, log_softmax = ar_log_probs(*params, prompts, responses, mask)
    fused_grads = torch.autograd.grad((fused * weights).sum(), params)

    torch.testing.assert_close(fused, plain, rtol=0, atol=1e-12)
    reference = torch.log_softmax(P.token_logits(policy, prompts, responses), dim=-1)
    torch.testing.assert_close(log_softmax, reference, rtol=0, atol=1e-12)
    for name, a, b in zip(["embedding", "encode", "decode", "previous"], fused_grads, plain_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=name)
    assert (fused_grads[3] * (1 - torch.ones(4, 4).tril(-1)[..., None, None].double()) == 0).all()


def test_fused_autoregressive_log_probs_refuse_per_run_prompts():
    policy, prompts, responses = setup(2)
    with pytest.raises(ValueError, match="shared by every run"):
        ar_log_probs(policy.embedding, policy.encode, policy.decode, policy.previous,
                     prompts.expand(2, *prompts.shape), responses, P.response_mask(policy, responses))
