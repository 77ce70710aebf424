"""lab.core.kl.penalized_rewards: the reward placement's penalty enters as a constant reward (PPO-RLHF), so the
update's gradient flows through the score of log pi only, never through the estimator itself (claim 14's reward
column assumes this; its proof detaches for itself, so this test holds the function to it)."""

import torch

from lab.core.kl import penalized_rewards


def test_the_penalised_reward_carries_no_gradient_of_the_estimator():
    """With log-probs that require grad, r - beta sum k is a constant: it has no grad_fn, and a REINFORCE surrogate
    sum(r' x log pi) built on it has the gradient of the same surrogate on r' computed from detached log-probs,
    for every estimator. Mutant: `penalized_rewards` without its `detach` (the estimator's own gradient then adds
    beta E[grad k]: the loss placement's term as well) fails both checks."""
    generator = torch.Generator().manual_seed(0)
    rewards = torch.randn(2, 4, generator=generator, dtype=torch.float64)
    ref_log_probs = torch.log_softmax(torch.randn(2, 4, 3, 5, generator=generator, dtype=torch.float64), -1)[..., 0]
    for estimator in ("k1", "k2", "k3"):
        logits = torch.randn(2, 4, 3, 5, generator=generator, dtype=torch.float64).requires_grad_(True)
        log_probs = torch.log_softmax(logits, -1)[..., 0]  # float[batch trial pos]
        shaped = penalized_rewards(rewards, log_probs, ref_log_probs, 0.7, estimator)
        assert shaped.grad_fn is None and not shaped.requires_grad
        constant = penalized_rewards(rewards, log_probs.detach(), ref_log_probs, 0.7, estimator)
        grad = torch.autograd.grad((shaped * log_probs.sum(-1)).sum(), logits, retain_graph=True)[0]
        expected = torch.autograd.grad((constant * log_probs.sum(-1)).sum(), logits)[0]
        assert torch.equal(grad, expected)
