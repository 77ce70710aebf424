"""The exact lens of GRPO's descendants (lab/exact/surrogate_lens.py, issue 37): each surrogate's expected gradient
under the old policy's samples, by enumeration, against its definition, and what it says at theta_old and after S
steps on one batch (claim 9 in docs/claims.md; claims 36..39 for the descendants)."""

import pytest
import torch

from lab.core.losses import compute_loss
from lab.exact.enumeration import all_responses, reward_table
from lab.exact.surrogate_lens import (descendant_lens, expected_gradient, expected_surrogate, inner_steps,
                                      kept_share, on_policy_gradient, population_advantages, sequence_probs,
                                      token_log_probs)
from tasks.sorting import make_task

LOSSES = {
    "naive": dict(loss="naive"),
    "unclipped": dict(loss="unclipped"),
    "ppo": dict(loss="clipped", clip_eps=0.2),
    "clip-higher": dict(loss="clipped", clip_eps=0.2, epsilon_high=0.28),
    "two-sided": dict(loss="clipped", clip_eps=0.2, clip_delta=1.1),
    "gspo": dict(loss="clipped", clip_eps=0.2, importance_sampling_level="sequence"),
    "cispo": dict(loss="cispo", epsilon_high=5.0),
    "sapo": dict(loss="sapo"),
    "luspo": dict(loss="luspo", clip_eps=0.2),
    "vespo": dict(loss="vespo"),
    "top-entropy": dict(loss="clipped", clip_eps=0.2, top_entropy_quantile=0.5),
}


def toy(seed: int = 0, vocab: int = 3, length: int = 2, prompts: int = 2):
    """Old and current logits float64[prompt pos vocab] about 0.5 nat apart, every response, and advantages."""
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(prompts, length, vocab, generator=g, dtype=torch.float64)
    current = old + 0.5 * torch.randn(prompts, length, vocab, generator=g, dtype=torch.float64)
    responses = all_responses(vocab, length)
    rewards = torch.randn(prompts, len(responses), generator=g, dtype=torch.float64)
    return old, current, responses, population_advantages(old, rewards, responses)


@pytest.mark.parametrize("name", list(LOSSES))
def test_expected_surrogate_is_the_old_policys_weighted_sum_of_each_responses_loss(name):
    """J_loss(theta; theta_old) = sum_y pi_old(y) L(y), L(y) the lab's loss of response y alone (a batch of one
    response, token-mean over its L tokens), and its gradient is the sum of theirs: value and gradient to 1e-12.
    Mutant tried: weighting by pi_theta instead of pi_old (the samples' policy) fails every loss. The top-entropy
    gate is the position's, the same for every response, so the per-response losses take it as given."""
    old, current, responses, advantages = toy()
    settings = dict(LOSSES[name])
    loss, quantile = settings.pop("loss"), settings.pop("top_entropy_quantile", 1.0)
    theta = current.clone().requires_grad_(True)
    value = expected_surrogate(theta, old, advantages, loss, responses, top_entropy_quantile=quantile, **settings)
    (grad,) = torch.autograd.grad(value.sum(), theta)
    brute = current.clone().requires_grad_(True)
    log_probs, old_lp = token_log_probs(brute, responses), token_log_probs(old, responses)
    gate = None
    if quantile < 1:
        from lab.exact.surrogate_lens import entropy_gate
        gate = entropy_gate(current, quantile, responses)
    total = torch.zeros(old.shape[0], dtype=torch.float64)
    for b in range(old.shape[0]):
        for i in range(len(responses)):
            one = compute_loss(log_probs[b, i].view(1, 1, -1), advantages[b, i].view(1, 1), loss,
                               old_lp[b, i].view(1, 1, -1), gate=None if gate is None else gate[b, i].view(1, 1, -1),
                               **settings)
            total[b] = total[b] + old_lp[b, i].sum().exp() * one
    (brute_grad,) = torch.autograd.grad(total.sum(), brute)
    torch.testing.assert_close(value.detach(), total.detach(), rtol=0, atol=1e-12)
    torch.testing.assert_close(grad, brute_grad, rtol=0, atol=1e-12)


def test_importance_weighting_by_the_sequence_ratio_recovers_the_on_policy_gradient():
    """g_on(theta) = -grad sum_y pi_theta(y) A(y) / L equals the old samples' importance-weighted score,
    -sum_y pi_old(y) (pi_theta(y) / pi_old(y)) A(y) grad log pi_theta(y) / L (the definition of importance
    sampling): the true sequence weight is the product of the token ratios. The lab's unclipped loss with token
    ratios, or with GSPO's geometric mean, is not it away from theta_old (both differ by over 1%). Mutant tried: the
    on-policy gradient without its 1 / L fails the first comparison."""
    old, current, responses, advantages = toy(1)
    theta = current.clone().requires_grad_(True)
    log_pi = token_log_probs(theta, responses).sum(-1)
    weights = (sequence_probs(current, responses) / sequence_probs(old, responses)).detach()
    importance = -(sequence_probs(old, responses) * weights * advantages * log_pi).sum() / responses.shape[1]
    (by_definition,) = torch.autograd.grad(importance, theta)
    g_on = on_policy_gradient(current, advantages, responses)
    torch.testing.assert_close(g_on, by_definition, rtol=0, atol=1e-12)
    for level in ("token", "sequence"):
        g = expected_gradient(current, old, advantages, "unclipped", responses, importance_sampling_level=level)
        assert (g - g_on).norm() / g_on.norm() > 0.01, level


@pytest.mark.parametrize("name", list(LOSSES))
def test_at_theta_old_every_descendant_has_the_on_policy_gradient(name):
    """Claim 36 (claim 9 for the lecture's losses): at theta = theta_old every ratio is 1, and each loss's expected gradient is the
    policy gradient (CISPO with eps_max >= 1, SAPO's gate of slope 4 sigmoid'(0) = 1, VESPO's phi(1) = 1, LUSPO's and
    GSPO's s_i = 1); the top-entropy gate keeps only its tokens' share. Mutant tried: SAPO without its 4 / tau fails."""
    old, _, responses, advantages = toy(2)
    settings = dict(LOSSES[name])
    g = expected_gradient(old, old, advantages, settings.pop("loss"), responses, **settings)
    g_on = on_policy_gradient(old, advantages, responses)
    if name == "top-entropy":
        assert 0 < kept_share(g, g_on).min() and kept_share(g, g_on).max() < 1
    else:
        torch.testing.assert_close(g, g_on, rtol=0, atol=1e-12)


def test_after_steps_on_one_batch_the_clip_keeps_less_of_the_on_policy_gradient_than_cispo():
    """After S = 10 steps of lr 1 on one batch of the lecture's prompts (inclusion-ordering, a random pi_old): PPO's
    clip (eps 0.2) keeps under a quarter of the on-policy gradient, clip-higher (0.28) more than PPO, and CISPO
    (eps_max 5, never reached here) exactly the unclipped loss's share, over 80% (claims 37 and 38, MiniMax-M1's and
    DAPO's). Mutant tried: CISPO's weight without its stop-gradient changes its share and fails the equality."""
    task = make_task()
    old = torch.randn(3, 3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    rewards = reward_table(task.prompts, "inclusion-ordering", 5, 3)
    rows = {r.name: r for r in descendant_lens(old, rewards, {k: LOSSES[k] for k in ("ppo", "clip-higher", "cispo",
                                                                                      "unclipped")}, 1.0, 10)}
    assert rows["ppo"].kept < 0.25 < rows["cispo"].kept and rows["cispo"].kept > 0.8
    assert rows["clip-higher"].kept > rows["ppo"].kept
    assert rows["cispo"].kept == pytest.approx(rows["unclipped"].kept, abs=1e-12)
    assert rows["ppo"].moved > 0.1  # the steps moved away from theta_old


def test_inner_steps_take_plain_gradient_steps_on_the_expected_surrogate():
    """theta_1 = theta_old - lr g_loss(theta_old), and at theta_old g_loss is the policy gradient (claim 9)."""
    old, _, responses, advantages = toy(3)
    one = inner_steps(old, advantages, "clipped", responses, 0.5, 1, clip_eps=0.2)
    torch.testing.assert_close(one, old - 0.5 * on_policy_gradient(old, advantages, responses), rtol=0, atol=1e-12)
