"""The DPO section's exact half: which objective each method's expected update ascends, and where it stops.

    GRPO, k3 in the loss     E[r] - beta' KL(pi_ref || pi)     pi' (lab.exact.reverse_kl)          beta' = beta G / (G-1)
    GRPO, k2 in the loss     E[r] - beta' KL(pi || pi_ref)     pi*_beta' = pi_ref exp(r / beta') / Z
    GRPO, k1 in the reward   E[r] - beta KL(pi || pi_ref)      pi*_beta  (the group scale multiplies both terms)
    DPO, Bradley-Terry       the preference likelihood         pi*_beta  (stationary, claim 28)
    DPO, argmax              no finite minimiser               its flow's limit: pi proportional to pi_ref^(1 + 1/beta)
                                                               on the top set (claim 28; a point mass for one best response)
    IPO, argmax (offline)    a convex quadratic                its minimiser, by Newton's method to |grad| < NEWTON_TOLERANCE

(centered deltas: the group scale (G-1)/G multiplies grad J, claims 4 and 14). Everything is per seed's reference
(pi_ref = that seed's initial policy) and per prompt, in the tabular class (any distribution over the 125
responses), in float64: no sampling, no budget. Pairs of offline DPO come from pi_ref; online pairs come from the
moving policy, whose fixed points this table does not compute.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lab.exact import optimum as O
from lab.exact import varlen
from lab.exact.pairs import population_dpo_loss
from lab.exact.reverse_kl import effective_beta, reverse_optimum
from lab.policies import make_policy

NEWTON_TOLERANCE = 1e-10
"""IPO's minimiser: Newton steps until every partial derivative of its population loss is at most this."""
NEWTON_STEPS = 20


def reference_tables(configs, prompts: Tensor) -> tuple[Tensor, Tensor]:
    """log pi_ref and rewards over every response, per seed's initial policy: float64[seed batch n] each."""
    refs, rewards = [], None
    for config in configs:
        policy = make_policy(config.policy, 5, prompts.shape[1], prompts.shape[1], config.dim,
                             torch.Generator().manual_seed(config.seed), config.init_scale).double()
        refs.append(varlen.all_log_probs(policy, prompts).detach())
        rewards = varlen.reward_table(policy, prompts, config.reward).double()
    ref = torch.stack(refs)
    return ref, rewards.expand_as(ref)


def top_set_limit(ref_log_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """The argmax flow's limit (claim 28): pi_ref^(1 + 1/beta) renormalised on the best responses, 0 elsewhere."""
    top = rewards == rewards.amax(-1, keepdim=True)
    logits = torch.where(top, (1 + 1 / beta) * ref_log_probs, torch.full_like(ref_log_probs, -torch.inf))
    return torch.softmax(logits, -1)


def ipo_minimiser(ref_log_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """IPO's population minimiser for offline argmax pairs, one prompt: float64[n] (theta_0 = 0 fixes the shift)."""
    def loss(free: Tensor) -> Tensor:
        theta = torch.cat([torch.zeros(1, dtype=free.dtype), free])
        return population_dpo_loss(torch.log_softmax(theta, -1), ref_log_probs, rewards, beta, "argmax", "ipo")

    free = (ref_log_probs - ref_log_probs[0])[1:]
    for _ in range(NEWTON_STEPS):
        grad = torch.autograd.functional.jacobian(loss, free)
        if float(grad.abs().max()) <= NEWTON_TOLERANCE:
            break
        free = free - torch.linalg.solve(torch.autograd.functional.hessian(loss, free), grad)
    return torch.softmax(torch.cat([torch.zeros(1, dtype=free.dtype), free]), -1)


def fixed_points(ref_log_probs: Tensor, rewards: Tensor, beta: float, group_size: int) -> dict[str, tuple[str, Tensor]]:
    """Per method: (the objective its expected update ascends, its fixed point float64[seed batch n])."""
    ref, prime = ref_log_probs.exp(), effective_beta(beta, (group_size - 1) / group_size)
    star = O.kl_regularized_optimum(ref, rewards, beta)
    ipo = torch.stack([torch.stack([ipo_minimiser(r, w, beta) for r, w in zip(rs, ws)])
                       for rs, ws in zip(ref_log_probs, rewards)])
    return {
        "GRPO, k3 in the loss": (f"E[r] - {prime:.4g} KL(pi_ref || pi)", reverse_optimum(ref, rewards, prime)),
        "GRPO, k2 in the loss": (f"E[r] - {prime:.4g} KL(pi || pi_ref)", O.kl_regularized_optimum(ref, rewards, prime)),
        "GRPO, k1 in the reward": (f"E[r] - {beta:g} KL(pi || pi_ref) = J_beta", star),
        "DPO, Bradley-Terry": ("the preference likelihood, stationary at pi*", star),
        "DPO, argmax (offline)": ("none finite: the losers' mass falls to 0", top_set_limit(ref_log_probs, rewards, beta)),
        "IPO, argmax (offline)": ("a convex quadratic in the logits", ipo),
    }


def exact_rows(configs, prompts: Tensor, beta: float, group_size: int) -> list[tuple[str, str, Tensor, Tensor, Tensor]]:
    """Per method: (label, objective, KL(fixed point || pi*), KL(fixed point || pi_ref), -log pi_ref(top set)),
    each float64[seed batch]."""
    ref_log_probs, rewards = reference_tables(configs, prompts)
    star = O.kl_regularized_optimum(ref_log_probs.exp(), rewards, beta)
    top = -torch.where(rewards == rewards.amax(-1, keepdim=True), ref_log_probs, -torch.inf).logsumexp(-1)
    return [(label, objective, O.kl_divergence(point, star), O.kl_divergence(point, ref_log_probs.exp()), top)
            for label, (objective, point) in fixed_points(ref_log_probs, rewards, beta, group_size).items()]
