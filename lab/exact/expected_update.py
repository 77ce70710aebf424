"""Each method's exact expected update in the tabular class, in natural coordinates: v = u / mu.

Per prompt, logits theta over the n enumerated responses, pi = softmax(theta), float64. u(theta) is the expected
update per unit learning rate (minus the expected gradient of the method's loss, lr -> 0, a fresh batch each step);
every u of the table below is mu (elementwise) times v, with mu > 0 the distribution the method's samples come from,
and the flow follows v instead: the same zeros (mu > 0), and along a gradient field still a descent direction
(diag(1 / mu) is positive definite). For mu = pi this is the natural gradient of the softmax (Kakade 2001); it
keeps the flow from stalling where pi(y) is small, as a plain gradient flow on logits does near a deterministic pi.

    GRPO, centered deltas of a group of G, token-mean over a fixed length C, the KL summed over positions:
        u = (s / C) grad J - beta grad KL,   s = (G-1)/G (claims 4, 14), mu = pi, with grad_theta E_pi[f] = pi (f - E_pi f):
        k3 in the loss     v = a (r - E_pi r) - beta (1 - pi_ref / pi)                   a = s / C   (KL(pi_ref || pi))
        k2 in the loss     v = a (r - E_pi r) - beta (log pi / pi_ref - KL(pi || pi_ref))
        k1 in the reward   v = a (r - E_pi r - beta (log pi / pi_ref - KL(pi || pi_ref)))   (the penalised reward's deltas)
        k3 in the reward   v = a (r - E_pi r - beta (log pi / pi_ref - KL(pi || pi_ref) - 1 + pi_ref / pi))
    DPO, a pair (a over b) with loss l(h_ab), h_ab = log pi(a)/pi_ref(a) - log pi(b)/pi_ref(b) (the lab's dpo_loss):
        W_ab = P(a pair is drawn, kept, a over b) = mu(a) mu(b) K_ab,  d_a = sum_b W_ab l'(h_ab) - W_ba l'(h_ba),
        u = -d (log Z cancels from h, so d is the whole gradient in theta),  v_a = -d_a / mu(a)
        offline    mu = pi_ref, K_ab = 2 q_ab (two i.i.d. draws, a wins with probability q_ab; argmax ties dropped)
        online     mu = pi,     K_ab = (k(r_a, r_b) + k(r_b, r_a)) q_ab: the group's highest against its lowest reward
                                (lab.exact.online_pairs), then the preference model

(q_ab: lab.core.dpo.preference_probability). Offline, W is the population of pairs from pi_ref (lab.exact.pairs); a
run's fixed set of N pairs per prompt is a sample of it. A batch averages over its kept pairs and its prompts: given
a prompt's pair, the other prompts' groups are independent of it, so this is a positive factor per prompt, which
changes the flow's speed, never its path or its fixed points, and is left out. The update is the
lr -> 0 limit of one step per batch: a loop's S Adam steps on one batch, and its clip at ratio 1 +- eps, do not
enter. Where a method has no fixed point (DPO under argmax preferences), the preconditioner can change where the
path heads among tied best responses (tests/exact/test_update_flow.py); its fixed points it never changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lab.core.choices import parse_choice
from lab.core.dpo import DPO_LOSSES
from lab.core.modes import DPOLoss, KLEstimator, KLPlacement, Pairs, Preference
from lab.exact.online_pairs import extreme_pair_weights
from lab.exact.pairs import pair_preferences


@dataclass(frozen=True)
class Method:
    """A method the flow follows: GRPO with a KL penalty (`estimator` set), or DPO (`pairs` set)."""

    estimator: KLEstimator | None = None
    placement: KLPlacement = KLPlacement.loss
    pairs: Pairs | None = None
    preference: Preference = Preference.argmax
    loss: DPOLoss = DPOLoss.sigmoid

    def __post_init__(self) -> None:
        for name, enum in (("estimator", KLEstimator), ("placement", KLPlacement), ("pairs", Pairs),
                           ("preference", Preference), ("loss", DPOLoss)):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, parse_choice(enum, getattr(self, name), name))
        if (self.estimator is None) == (self.pairs is None):
            raise ValueError("a method is GRPO (give its KL estimator) or DPO (give its pairs), not both or neither")


@dataclass(frozen=True)
class Problem:
    """What the expected update depends on besides theta: per prompt tables float64[... n] and the settings."""

    ref_log_probs: Tensor
    rewards: Tensor
    beta: float
    group_size: int
    horizon: int
    """C: the response length the token-mean divides the policy-gradient term by"""


def _kl(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    return (log_probs.exp() * (log_probs - ref_log_probs)).sum(-1, keepdim=True)


PENALTIES = {
    (KLEstimator.k3, KLPlacement.loss): lambda lp, ref: 1 - (ref - lp).exp(),
    (KLEstimator.k2, KLPlacement.loss): lambda lp, ref: lp - ref - _kl(lp, ref),
    (KLEstimator.k1, KLPlacement.reward): lambda lp, ref: lp - ref - _kl(lp, ref),
    (KLEstimator.k3, KLPlacement.reward): lambda lp, ref: lp - ref - _kl(lp, ref) - 1 + (ref - lp).exp(),
}
"""(estimator, placement) -> the natural direction beta multiplies, grad KL / pi (claim 14): k3 in the loss
KL(pi_ref || pi), k2 in the loss and k1 in the reward KL(pi || pi_ref), k3 in the reward KL(pi || pi_ref) -
KL(pi_ref || pi) (unbounded above: claim 35)."""


def grpo_update(method: Method, log_probs: Tensor, problem: Problem) -> Tensor:
    """v float64[... n] of GRPO with centered deltas (module docstring)."""
    key = (method.estimator, method.placement)
    if key not in PENALTIES:
        raise ValueError(f"no expected-update flow for {key[0].value} in the {key[1].value}; "
                         f"choose one of {[(k.value, p.value) for k, p in PENALTIES]}")
    g, rewards = problem.group_size, problem.rewards.to(log_probs)
    scale = (g - 1) / g / problem.horizon
    advantage = rewards - (log_probs.exp() * rewards).sum(-1, keepdim=True)
    penalty = problem.beta * PENALTIES[key](log_probs, problem.ref_log_probs)
    if method.placement is KLPlacement.reward:
        return scale * (advantage - penalty)
    return scale * advantage - penalty


def dpo_update(method: Method, log_probs: Tensor, problem: Problem) -> Tensor:
    """v float64[... n] of DPO or IPO on offline or online pairs (module docstring)."""
    ref = problem.ref_log_probs
    q, kept = pair_preferences(problem.rewards.to(log_probs), method.preference)
    q = torch.where(kept, q, torch.zeros((), dtype=q.dtype))
    if method.pairs is Pairs.offline:
        mu, k = ref.exp(), 2 * q
    else:
        mu = log_probs.exp()
        extreme = extreme_pair_weights(mu, problem.rewards, problem.group_size)
        k = (extreme + extreme.transpose(-1, -2)) * q
    ratio = log_probs - ref
    h = (ratio.unsqueeze(-1) - ratio.unsqueeze(-2)).detach().requires_grad_(True)  # float[... n(a) n(b)]
    slope = torch.autograd.grad(DPO_LOSSES[method.loss](h, problem.beta, 0.0).sum(), h)[0]  # l'(h_ab)
    weighted = k * slope
    return (mu.unsqueeze(-2) @ weighted).squeeze(-2) - (weighted @ mu.unsqueeze(-1)).squeeze(-1)  # -d / mu


def natural_update(method: Method, theta: Tensor, problem: Problem) -> Tensor:
    """v(theta) float64[... n]: the method's expected update divided by its sampling distribution."""
    log_probs = torch.log_softmax(theta, -1)
    return (dpo_update if method.pairs is not None else grpo_update)(method, log_probs, problem)
