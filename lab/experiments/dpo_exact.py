"""The DPO section's exact half: which objective each method's expected update ascends, and where its flow goes.

    GRPO, k3 in the loss     E[r] - beta' KL(pi_ref || pi)     closed form pi' (lab.exact.reverse_kl)  beta' = beta C G / (G-1)
    GRPO, k2 in the loss     E[r] - beta' KL(pi || pi_ref)     pi*_beta' = pi_ref exp(r / beta') / Z
    GRPO, k1 in the reward   E[r] - beta KL(pi || pi_ref)      pi*_beta  (the group scale multiplies both terms)

Every method is compared at the same beta' (the section's beta): the loss placement's flow runs at beta = beta'
(G-1) / (G C), as the section's runs do (lab.experiments.dpo_results.matched_kl).
    DPO, Bradley-Terry       stationary at pi*_beta (claim 28; online too: each pair's expected gradient is 0 there)
    DPO, argmax (offline)    no finite minimiser: the limit pi proportional to pi_ref^(1 + 1/beta) on the top set
    IPO, argmax (offline)    a convex quadratic: its minimiser, by Newton's method to |grad| < NEWTON_TOLERANCE
    online DPO / IPO, argmax pairs from the moving policy (a group's best against its worst): no closed form

(centered deltas of G: the group scale (G-1)/G multiplies grad J, claims 4 and 14; the token mean over the C
positions divides the policy-gradient term by C while the KL term sums them). Where each method goes is the end of
its exact expected-update flow (`lab.exact.update_flow`, to `UpdateFlowConfig`'s tolerances), per seed's reference
(pi_ref = that seed's initial policy) and prompt, in the tabular class (any distribution over the 125 responses),
in float64: no sampling, no budget. The closed forms stay beside it as a check.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
from torch import Tensor

from lab.exact import optimum as O
from lab.exact import varlen
from lab.exact.expected_update import Method, Problem
from lab.exact.pairs import population_dpo_loss
from lab.exact.reverse_kl import effective_beta, reverse_optimum
from lab.exact.update_flow import UpdateFlow, UpdateFlowConfig, follow
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


METHODS = {
    "GRPO, k3 in the loss": Method(estimator="k3"),
    "GRPO, k2 in the loss": Method(estimator="k2"),
    "GRPO, k1 in the reward": Method(estimator="k1", placement="reward"),
    "online DPO, argmax": Method(pairs="online"),
    "online DPO, Bradley-Terry": Method(pairs="online", preference="bradley-terry"),
    "online IPO, argmax": Method(pairs="online", loss="ipo"),
    "offline DPO, argmax": Method(pairs="offline"),
    "offline DPO, Bradley-Terry": Method(pairs="offline", preference="bradley-terry"),
    "offline IPO, argmax": Method(pairs="offline", loss="ipo"),
}
"""The methods of the section (the labels of lab.experiments.dpo_results.SETTINGS), as the flow follows them."""


def loss_beta(beta_prime: float, group_size: int, horizon: int) -> float:
    """The beta a KL in the loss takes for its beta' to be `beta_prime`: beta' s / C, s = (G-1)/G (claim 14)."""
    return beta_prime / effective_beta(1.0, (group_size - 1) / group_size / horizon)


def closed_forms(ref_log_probs: Tensor, rewards: Tensor, beta: float, group_size: int,
                 horizon: int) -> dict[str, tuple[str, Tensor]]:
    """Per method with one: (the objective its expected update ascends, its closed-form end float64[seed batch n], None
    where it has no finite one), every method at beta' = beta."""
    ref, prime = ref_log_probs.exp(), beta  # the loss placement runs at beta' = beta: `loss_beta`
    star = O.kl_regularized_optimum(ref, rewards, beta)
    ipo = torch.stack([torch.stack([ipo_minimiser(r, w, beta) for r, w in zip(rs, ws)])
                       for rs, ws in zip(ref_log_probs, rewards)])
    return {
        "GRPO, k3 in the loss": (f"E[r] - {prime:.4g} KL(pi_ref || pi)", reverse_optimum(ref, rewards, prime)),
        "GRPO, k2 in the loss": (f"E[r] - {prime:.4g} KL(pi || pi_ref)", O.kl_regularized_optimum(ref, rewards, prime)),
        "GRPO, k1 in the reward": (f"E[r] - {beta:g} KL(pi || pi_ref) = J_beta", star),
        "online DPO, Bradley-Terry": ("the preference likelihood, stationary at pi*", star),
        "offline DPO, Bradley-Terry": ("the preference likelihood, stationary at pi*", star),
        "offline DPO, argmax": ("none finite: the losers' mass falls to 0", None),  # its limit: `top_set_limit`
        "offline IPO, argmax": ("a convex quadratic in the logits", ipo),
    }


ONLINE_OBJECTIVE = "none: its pairs come from the moving policy"
"""The objective column of the online methods without a closed form (their expected update is no gradient)."""


@dataclass(frozen=True)
class ExactRow:
    """One method's exact results, each float64[seed batch] (the closed-form columns None where it has none)."""

    label: str
    objective: str
    flow: UpdateFlow
    to_star: Tensor
    """KL(flow's end || pi*)"""
    to_ref: Tensor
    """KL(flow's end || pi_ref)"""
    top: Tensor
    """-log pi_ref(top set)"""
    to_closed: Tensor | None
    """KL(flow's end || closed form), None without a finite closed form"""


def exact_rows(configs, prompts: Tensor, beta: float, group_size: int,
               flow: UpdateFlowConfig = UpdateFlowConfig()) -> list[ExactRow]:
    """Each method of `METHODS`: its flow's end against pi*, pi_ref, the top set and its closed form."""
    ref_log_probs, rewards = reference_tables(configs, prompts)
    horizon = prompts.shape[1]  # the factorised policy's responses are as long as the prompts
    problem = Problem(ref_log_probs, rewards, beta, group_size, horizon)
    in_loss = Problem(ref_log_probs, rewards, loss_beta(beta, group_size, horizon), group_size, horizon)
    star = O.kl_regularized_optimum(ref_log_probs.exp(), rewards, beta)
    top = -torch.where(rewards == rewards.amax(-1, keepdim=True), ref_log_probs, -torch.inf).logsumexp(-1)
    closed = closed_forms(ref_log_probs, rewards, beta, group_size, horizon)
    rows = []
    for label, method in METHODS.items():
        end = follow(method, in_loss if method.estimator is not None and method.placement.value == "loss" else problem,
                     flow)
        probs = end.log_probs.exp()
        objective, point = closed.get(label, (ONLINE_OBJECTIVE, None))
        rows.append(ExactRow(label, objective, end, O.kl_divergence(probs, star), O.kl_divergence(
            probs, ref_log_probs.exp()), top, None if point is None else O.kl_divergence(probs, point)))
    return rows


def _outcomes(row) -> str:
    """How the flow ended over the references and prompts: `converged (60/60)`, or each outcome with its count."""
    counts = Counter(row.flow.outcome())
    return "; ".join(f"{outcome} ({count}/{sum(counts.values())})" for outcome, count in counts.most_common())


def exact_markdown(configs, prompts, beta: float) -> tuple[list[str], list[tuple[str, str, str, str]]]:
    """Where each method goes (its exact expected-update flow, `lab.experiments.dpo_exact`; means over references
    and prompts), then the exact verdicts on the implicit KL. configs: one per seed (their references)."""
    flow = UpdateFlowConfig()
    rows = exact_rows(configs, torch.as_tensor(prompts), beta, configs[0].group_size, flow)
    out = [f"Where each method goes, exactly (`lab/experiments/dpo_exact.py`): the objective its expected update "
           f"ascends with centered deltas of G = {configs[0].group_size}, the token mean over C = {len(prompts[0])} "
           "positions and the KL summed over them (claims 4, 14, 26, 28), and the end of its exact expected-update "
           "flow in the tabular class (`lab/exact/update_flow.py`: natural coordinates, Euler steps that change the "
           f"update by at most {flow.change_tolerance:.0%}; converged when no log-ratio of two responses moves faster "
           f"than {flow.update_tolerance:g} per unit time and the path left at the current decay is below "
           f"{flow.distance_tolerance:g} nats; otherwise stopped at flow time {flow.max_time:g}), for each seed's "
           f"reference and prompt (no sampling, no budget); means over the {len(configs)} references and "
           f"{len(prompts)} prompts. J_beta(pi*) - J_beta(end) = beta KL(end || pi*) (claim 26). The last column "
           "checks the flow against the closed form where there is one (`lab/experiments/dpo_exact.py`): the "
           "largest KL(end || closed form).", "",
           "| method | objective ascended | flow's end | KL(end \\|\\| pi*) | J_beta gap | KL to pi_ref "
           "| -log pi_ref(top set) | closed-form check |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    verdicts = []
    for row in rows:
        to_star, to_ref, top = max(float(row.to_star.mean()), 0.0), float(row.to_ref.mean()), float(row.top.mean())
        check = "-" if row.to_closed is None else f"{float(row.to_closed.abs().max()):.1e}"
        out.append(f"| {row.label} | {row.objective} | {_outcomes(row)} | {to_star:.3f} | {beta * to_star:.4f} | "
                   f"{to_ref:.2f} | {top:.2f} | {check} |")
        if "DPO" in row.label or "IPO" in row.label:
            stops = bool(row.flow.converged.all()) and bool((row.to_ref < row.top).all())
            moving = not bool(row.flow.converged.any())
            verdicts.append((f"the implicit KL stops rising before -log pi_ref(top set) ({row.label})",
                             "exact: the flow converges on every reference and prompt at a KL to pi_ref below -log "
                             "pi_ref(top set) (holds), or converges on none (does not hold); mean KL at the "
                             "flow's end against -log pi_ref(top set)", f"{to_ref:.2f} against {top:.2f} nats",
                             "holds" if stops else "does not hold" if moving else "inconclusive"))
    out += ["", "Under argmax preferences DPO's update decays only like 1 / time (claim 28: no finite minimiser): "
            "its flow never converges, the losers' mass falls below float64's resolution and the KL reaches "
            "-log pi_ref(y) of the response it collapses onto, the best one where pi_ref gives the best responses "
            "enough weight early on. The lecture's prompts have one best response each. Where several tie, how the "
            "limit splits them depends on the parametrisation, since no fixed point decides it: the plain gradient "
            "flow on logits ends at pi_ref^(1 + 1/beta) on the top set, whose KL exceeds -log pi_ref(top set) by "
            "an amount beta sets (claim 28's tie proof); this natural flow pushes every best response's log-ratio "
            "alike and ends at pi_ref restricted to the top set, whose KL is -log pi_ref(top set) "
            "(`tests/exact/test_update_flow.py`). Online pairs are a group's highest reward against its lowest, drawn from the moving policy "
            "(`lab/exact/online_pairs.py`: their exact distribution); their expected update is no gradient of a "
            "fixed loss, so the flow is the only answer for online argmax DPO and IPO."]
    return out, verdicts
