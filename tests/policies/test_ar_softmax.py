"""The autoregressive node's output layer in its vocab-first layout (a speed path) against the plain rows layout.

    log_softmax = logits - logsumexp(logits),  logsumexp = log(sum exp(logits - max)) + max   (torch's own formula)

lab/policies/ar_softmax.py claims the two layouts are the same arithmetic element by element, so the log-probs
and gradients (hence every trajectory) are bitwise the plain layout's in float32; the entropy, a metric, moves by
float32 rounding only. The float64 comparison of the fused node with the plain autograd path is
tests/policies/test_fused.py (it now runs the vocab-first layout at the lecture's vocabulary).
"""

import pytest
import torch

import lab.policies as P
import lab.policies.ar_fused as ar_fused
from lab.policies.ar_softmax import SHORT_SUM_MAX, VOCAB_FIRST_EXACT, short_sum, vocab_first

needs_torchs_order = pytest.mark.skipif(not VOCAB_FIRST_EXACT, reason="this torch sums a short axis in another "
                                        "order, so the node keeps the plain layout (vocab_first is False)")


@needs_torchs_order
@pytest.mark.parametrize("n", range(1, SHORT_SUM_MAX + 1))
def test_short_sum_is_torchs_sum_of_a_short_last_axis(n):
    """short_sum adds in torch's order (mutant tried: left to right, which differs from n = 5 on)."""
    values = torch.randn(20000, n, generator=torch.Generator().manual_seed(n)).mul(3).exp()
    assert torch.equal(short_sum(list(values.unbind(-1))), values.sum(-1))


def test_the_layout_falls_back_past_the_short_sum():
    assert not vocab_first(SHORT_SUM_MAX + 1)
    assert vocab_first(6) == VOCAB_FIRST_EXACT  # the lecture's 5 tokens and EOS


def _run(monkeypatch, fast: bool, seed: int = 0):
    """Log-probs, entropy and gradients of a 3-run float32 stack at the lecture's sizes, in one layout."""
    monkeypatch.setattr(ar_fused, "vocab_first", lambda tokens: fast)
    generators = [torch.Generator().manual_seed(seed + r) for r in range(3)]
    policy = P.make_stack("autoregressive", 5, 3, 5, 10, generators)
    prompts = torch.randint(0, 5, (3, 3), generator=torch.Generator().manual_seed(seed + 50))
    responses = P.sample(policy, prompts, 10, generators)
    mask = P.response_mask(policy, responses)
    params = [policy.embedding, policy.encode, policy.decode, policy.previous]
    weights = torch.randn(responses.shape, generator=torch.Generator().manual_seed(seed + 7))
    log_probs, entropy = ar_fused.ar_log_probs(*params, prompts, responses, mask)
    return log_probs, entropy, mask, torch.autograd.grad((log_probs * weights).sum(), params)


@needs_torchs_order
@pytest.mark.parametrize("seed", [0, 1])
def test_vocab_first_layout_is_bitwise_the_rows_layout(monkeypatch, seed):
    """Same log-probs and gradients to the bit, so a run's trajectory does not depend on the layout (mutant
    tried: the logsumexp's sum as `shifted.sum(1)`, torch's sum over a middle axis, fails the log-probs); the
    entropy within float32 rounding."""
    fast, fast_entropy, mask, fast_grads = _run(monkeypatch, True, seed)
    plain, plain_entropy, _, plain_grads = _run(monkeypatch, False, seed)
    assert (~mask).any()  # padding is exercised
    assert torch.equal(fast, plain)
    for a, b in zip(fast_grads, plain_grads):
        assert torch.equal(a, b)
    torch.testing.assert_close(fast_entropy[mask], plain_entropy[mask], rtol=1e-6, atol=1e-6)
