"""The exact expected gradient of each surrogate under the old policy's samples: what a descendant of the clip changes.

The factorised toy (`lab.exact.enumeration`), per prompt logits theta float64[batch pos vocab], every response y of
length L enumerated, A(y) a fixed advantage table (`population_advantages`: r(y) - E_old r, the large-group limit
of centered deltas up to the factor (G - 1) / G of claim 4). For a surrogate with per-token loss l_t(theta; y):

    J_loss(theta; theta_old) = sum_y pi_old(y) (1/L) sum_t g_t l_t(theta; y)        (token-mean, fixed length)
    g_loss(theta)            = grad_theta J_loss                                    (autograd, float64)
    g_on(theta)              = -grad_theta sum_y pi_theta(y) A(y) / L               (the on-policy gradient at theta)
    kept(theta)              = <g_loss, g_on> / <g_on, g_on>                         (its share kept by the loss)

g_t is the top-entropy gate of the position (the factorised policy's token entropy is its position's; the quantile
over the batch's (prompt, position) entries, each once: a large batch's). At theta = theta_old every ratio loss has
g_loss = g_on (claim 9; CISPO needs eps_max >= 1, VESPO phi(1) = 1, SAPO's gate has slope 1 at ratio 1), so the
exact flows of `lab.exact.update_flow` (lr -> 0, a fresh batch per step) are GRPO's for all of them: they differ only
once a batch is reused. `inner_steps` takes S plain gradient steps of size lr on J from theta_old (the population
version of a loop's S steps on one batch), and `kept` at theta_S is the share of the on-policy gradient each clip
leaves. Token ratios against sequence ratios: the unclipped loss at `importance_sampling_level` token or sequence,
against g_on, which only the product of the token ratios (the sequence's true importance weight) recovers exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lab.core.aggregation import aggregate
from lab.core.losses import compute_loss
from lab.core.token_masks import top_entropy_gate
from lab.exact.enumeration import all_responses


def token_log_probs(logits: Tensor, responses: Tensor) -> Tensor:
    """log pi_t(y_t) of every response: logits float[batch pos vocab], responses int[n pos] -> float[batch n pos]."""
    table = torch.log_softmax(logits, dim=-1)  # float[batch pos vocab]
    index = responses.T.unsqueeze(0).expand(logits.shape[0], -1, -1)  # int[batch pos n]
    return table.gather(-1, index).transpose(-1, -2)


def sequence_probs(logits: Tensor, responses: Tensor) -> Tensor:
    """pi(y) float[batch n]."""
    return token_log_probs(logits, responses).sum(-1).exp()


def population_advantages(old_logits: Tensor, rewards: Tensor, responses: Tensor) -> Tensor:
    """A(y) = r(y) - E_{pi_old} r, float64[batch n] (rewards float[batch n] in the order of `responses`)."""
    probs = sequence_probs(old_logits.detach().double(), responses)
    rewards = rewards.to(probs)
    return rewards - (probs * rewards).sum(-1, keepdim=True)


def entropy_gate(logits: Tensor, quantile: float, responses: Tensor) -> Tensor | None:
    """The top-entropy gate of each token, bool[batch n pos] (None at quantile 1): its position's entropy against
    the (1 - quantile)-quantile of the batch's positions (`lab.core.token_masks.top_entropy_gate`)."""
    if quantile >= 1:
        return None
    log_p = torch.log_softmax(logits.detach(), dim=-1)
    entropies = -(log_p.exp() * log_p).sum(-1)  # float[batch pos]
    gate = top_entropy_gate(entropies.unsqueeze(1), None, quantile)  # bool[batch 1 pos]
    return gate.expand(-1, responses.shape[0], -1)


def expected_surrogate(logits: Tensor, old_logits: Tensor, advantages: Tensor, loss: str, responses: Tensor,
                       top_entropy_quantile: float = 1.0, **settings) -> Tensor:
    """J_loss(theta; theta_old) per prompt, float[batch] (module docstring); `settings` as `compute_loss`'s. The
    lab's own loss (`compute_loss`) on every response at once, prompts as a leading axis, each response's tokens
    weighted by pi_old(y) (and the gate) through `gate`, averaged per response (seq-mean-token-mean) and summed."""
    log_probs = token_log_probs(logits, responses)  # float[batch n pos]
    old = token_log_probs(old_logits.detach(), responses)
    weights = old.sum(-1).exp().unsqueeze(-1).expand_as(old)  # pi_old(y) on each of its tokens
    gate = entropy_gate(logits, top_entropy_quantile, responses)
    if gate is not None:
        weights = weights * gate
    per_prompt = compute_loss(log_probs.unsqueeze(1), advantages.unsqueeze(1), loss, old.unsqueeze(1),
                              agg="seq-mean-token-mean", gate=weights.unsqueeze(1), **settings)
    return per_prompt * responses.shape[0]  # the mean over the n responses back to their weighted sum


def expected_gradient(logits: Tensor, old_logits: Tensor, advantages: Tensor, loss: str, responses: Tensor,
                      **settings) -> Tensor:
    """g_loss(theta) = grad_theta of the prompts' summed J_loss, float64[batch pos vocab]."""
    theta = logits.detach().double().requires_grad_(True)
    value = expected_surrogate(theta, old_logits.double(), advantages.double(), loss, responses, **settings)
    return torch.autograd.grad(value.sum(), theta)[0]


def on_policy_gradient(logits: Tensor, advantages: Tensor, responses: Tensor) -> Tensor:
    """g_on(theta) = -grad_theta sum_y pi_theta(y) A(y) / L, float64[batch pos vocab]: the policy gradient at theta
    itself (A's baseline, a constant, does not move it)."""
    theta = logits.detach().double().requires_grad_(True)
    value = -(sequence_probs(theta, responses) * advantages.double()).sum() / responses.shape[1]
    return torch.autograd.grad(value, theta)[0]


def kept_share(gradient: Tensor, on_policy: Tensor) -> Tensor:
    """<g, g_on> / <g_on, g_on> per prompt, float[batch]: the share of the on-policy gradient g keeps."""
    return (gradient * on_policy).sum((-2, -1)) / (on_policy * on_policy).sum((-2, -1))


def inner_steps(old_logits: Tensor, advantages: Tensor, loss: str, responses: Tensor, lr: float, steps: int,
                **settings) -> Tensor:
    """theta_S: S plain gradient steps theta <- theta - lr g_loss(theta) from theta_old on the expected surrogate
    (under pi_old's samples throughout: one batch reused), float64[batch pos vocab]."""
    theta = old_logits.detach().double()
    for _ in range(steps):
        theta = theta - lr * expected_gradient(theta, old_logits, advantages, loss, responses, **settings)
    return theta


def per_sample_variance(logits: Tensor, old_logits: Tensor, advantages: Tensor, loss: str, responses: Tensor,
                        **settings) -> Tensor:
    """tr Cov_{y ~ pi_old}[grad L(y)] per prompt, float64[batch]: the variance of one sampled response's gradient
    (L(y) its token-mean loss alone), summed over the parameters, exactly: E ||grad L||^2 - ||E grad L||^2."""
    theta = logits.detach().double().requires_grad_(True)
    log_probs, old = token_log_probs(theta, responses), token_log_probs(old_logits.double(), responses)
    prompts, n, length = log_probs.shape
    losses = compute_loss(log_probs.reshape(prompts * n, 1, 1, length), advantages.reshape(prompts * n, 1, 1).double(),
                          loss, old.reshape(prompts * n, 1, 1, length), **settings)  # one per response
    grads = torch.stack([torch.autograd.grad(value, theta, retain_graph=True)[0] for value in losses])
    grads = grads.reshape(prompts, n, -1)  # a response's loss moves only its own prompt's logits
    weights = old.sum(-1).exp()  # float[batch n]
    mean = (weights.unsqueeze(-1) * grads).sum(1)
    return (weights * (grads ** 2).sum(-1)).sum(1) - (mean ** 2).sum(-1)


@dataclass(frozen=True)
class LensRow:
    """What one loss keeps of the on-policy gradient after S steps on one batch (`descendant_lens`)."""

    name: str
    kept: float
    """<g_loss, g_on> / <g_on, g_on> at theta_S, the mean over prompts"""
    cosine: float
    """the cosine of g_loss and g_on at theta_S (all prompts' entries as one vector)"""
    moved: float
    """max |theta_S - theta_old|: how far the S steps went"""


def descendant_lens(old_logits: Tensor, rewards: Tensor, losses: dict[str, dict], lr: float, steps: int
                    ) -> list[LensRow]:
    """For each named loss (its `compute_loss` settings, `loss` among them): S steps from theta_old on one batch,
    then its expected gradient against the on-policy gradient there. rewards float[batch n] of `all_responses`."""
    vocab, length = old_logits.shape[-1], old_logits.shape[-2]
    responses = all_responses(vocab, length)
    advantages = population_advantages(old_logits, rewards, responses)
    rows = []
    for name, settings in losses.items():
        settings = dict(settings)
        loss = settings.pop("loss")
        theta = inner_steps(old_logits, advantages, loss, responses, lr, steps, **settings)
        g = expected_gradient(theta, old_logits, advantages, loss, responses, **settings)
        g_on = on_policy_gradient(theta, advantages, responses)
        cosine = (g * g_on).sum() / (g.norm() * g_on.norm())
        rows.append(LensRow(name, kept_share(g, g_on).mean().item(), cosine.item(),
                            (theta - old_logits.double()).abs().max().item()))
    return rows
