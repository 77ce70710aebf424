"""Where each reference scheme takes the policy under a KL penalty: the exact expected-update iteration in the
tabular class (per prompt, logits theta over the n enumerated responses; lab.exact.expected_update).

    theta <- theta + lr pi v,   v = a (r - E_pi r) - beta kappa(pi, pi_ref)      (kappa: PENALTIES, claim 14; k3 in
                                                                                 the loss by default, as the lab)
    frozen     phi = theta_0 always                   with k2 the fixed point is pi* = pi_0 exp(a r / beta) / Z
                                                      (claim 26); with k3 the stationary point of KL(pi_0 || pi)
    periodic   phi <- theta every P steps             (the lab's --kl-period, in steps)
    synced     phi <- alpha theta + (1 - alpha) phi every tau steps   (TRL's sync_ref_model; theta are the logits
                                                      here, so mixing parameters is mixing logits; the lab's network
                                                      mixes its weights)

At a fixed point of a moving reference phi = theta, where kappa = 0, so the update is a (r - E_pi r) = 0: the policy
sits on its reward's maximisers. A synced or periodic reference ascends E_pi[r] itself, the KL only slowing it (a
trust region that moves with the policy); a frozen one ascends J_beta and stops at its optimum. `follow_reference`
returns the path's expected reward and KL to pi_0, so that the difference has a number. Deterministic: no sampling;
each step is the lr -> 0 expected update of one optimizer step on a fresh batch (u = pi v: the plain gradient in
logits, so the relative speed of policy and reference is the training loop's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lab.core.modes import KLEstimator, KLPlacement
from lab.exact.expected_update import PENALTIES


@dataclass(frozen=True)
class ReferencePath:
    expected_reward: Tensor
    """float[step batch]: E_pi[r] after each step"""
    kl_initial: Tensor
    """float[step batch]: KL(pi || pi_0) after each step"""
    log_probs: Tensor
    """float[batch n]: log pi at the end"""


def follow_reference(initial_log_probs: Tensor, rewards: Tensor, beta: float, steps: int, lr: float,
                     alpha: float | None = None, every: int | None = None, scale: float = 1.0,
                     estimator: KLEstimator | str = KLEstimator.k3) -> ReferencePath:
    """The iteration from theta = phi = log pi_0 float64[batch n] (rewards float64[batch n]): a frozen reference when
    `every` is None, else the reference mixed to alpha theta + (1 - alpha) phi after every `every`-th step (alpha =
    1: the periodic refresh). `scale` is a, (G - 1) / (G C) for centered deltas of G over length C (1: REINFORCE
    with the exact baseline)."""
    penalty = PENALTIES[(KLEstimator(estimator), KLPlacement.loss)]
    theta, phi = initial_log_probs.clone(), initial_log_probs.clone()
    rewards_path, kl_path = [], []
    for step in range(1, steps + 1):
        log_probs = torch.log_softmax(theta, -1)
        probs = log_probs.exp()
        v = scale * (rewards - (probs * rewards).sum(-1, keepdim=True)) - beta * penalty(
            log_probs, torch.log_softmax(phi, -1))
        theta = theta + lr * probs * v
        if every is not None and step % every == 0:
            phi = alpha * theta + (1 - alpha) * phi
        log_probs = torch.log_softmax(theta, -1)
        rewards_path.append((log_probs.exp() * rewards).sum(-1))
        kl_path.append((log_probs.exp() * (log_probs - initial_log_probs)).sum(-1))
    return ReferencePath(torch.stack(rewards_path), torch.stack(kl_path), torch.log_softmax(theta, -1))
