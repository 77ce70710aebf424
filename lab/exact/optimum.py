"""The KL-regularised optimum, exactly: a sum over every response of a prompt.

    J_beta(pi)  = sum_y pi(y) r(y) - beta KL(pi || pi_ref)                      per prompt
    pi*(y)      = pi_ref(y) exp(r(y) / beta) / Z,      Z = sum_y pi_ref(y) exp(r(y) / beta)
    J_beta(pi*) = beta log Z,       J_beta(pi*) - J_beta(pi) = beta KL(pi || pi*)   for every pi

(claim 26, docs/claims.md; Rafailov et al. 2023, section 4). Tables are float[... n] over the n
enumerated responses of a prompt: `lab.exact.varlen` enumerates both policies' spaces (the
factorised policy's V^L, the autoregressive one's variable-length responses), so the `policy_*`
functions work for either. beta must be > 0 (at beta = 0 the optimum is the argmax, not this formula).

Neither policy class can represent every pi*: `best_in_class` ascends J_beta exactly on the policy's own
parameters, a local ascent (J_beta is not concave in them), from `AscentConfig.starts` starts, and keeps
the best: a lower bound on the best J_beta the class reaches, not a proof of it (`AscentConfig` states the
stopping rule). `kl_to_optimum` and `objective_gap` measure how far a trained policy is from pi*.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from enum import Enum

import torch
from torch import Tensor, nn

from lab.exact import varlen


def _check_beta(beta: float) -> None:
    if not beta > 0:
        raise ValueError(f"the KL-regularised optimum needs beta > 0, got {beta}")


def log_optimum(ref_log_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """log pi*(y) = log pi_ref(y) + r(y) / beta - log Z: float[... n]."""
    _check_beta(beta)
    return torch.log_softmax(ref_log_probs + rewards.to(ref_log_probs) / beta, dim=-1)


def kl_regularized_optimum(ref_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """pi*(y) = pi_ref(y) exp(r(y) / beta) / Z over the enumerated responses: float[... n] (rows sum to 1)."""
    return log_optimum(ref_probs.log(), rewards, beta).exp()


def log_partition(ref_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """log Z = log sum_y pi_ref(y) exp(r(y) / beta): float[...] (beta log Z = J_beta(pi*))."""
    _check_beta(beta)
    return torch.logsumexp(ref_probs.log() + rewards.to(ref_probs) / beta, dim=-1)


def kl_divergence(probs: Tensor, other_probs: Tensor) -> Tensor:
    """KL(p || q) = sum_y p log(p / q) over the last axis, with 0 log 0 = 0: float[...]."""
    return (torch.xlogy(probs, probs) - torch.xlogy(probs, other_probs)).sum(dim=-1)


def kl_regularized_objective(probs: Tensor, ref_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """J_beta(pi) = sum_y pi(y) r(y) - beta KL(pi || pi_ref) per prompt: float[...], differentiable."""
    return (probs * rewards.to(probs)).sum(dim=-1) - beta * kl_divergence(probs, ref_probs)


def _objective_from_logs(log_probs: Tensor, ref_log_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """J_beta from log-prob tables of full-support policies (no 0 log 0): float[...]."""
    probs = log_probs.exp()
    return (probs * (rewards - beta * (log_probs - ref_log_probs))).sum(dim=-1)


def _reverse_from_logs(log_probs: Tensor, ref_log_probs: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """J'_beta = E_pi[r] - beta KL(pi_ref || pi) from log-prob tables (`lab.exact.reverse_kl`): float[...]."""
    return (log_probs.exp() * rewards).sum(dim=-1) - beta * (ref_log_probs.exp() * (ref_log_probs - log_probs)).sum(-1)


class Objective(str, Enum):
    """Which KL-regularised objective an ascent maximises: J_beta (KL(pi || pi_ref): k2 in the loss, k1 in the
    reward, DPO) or the reverse J'_beta (KL(pi_ref || pi): k3 in the loss; claim 14)."""

    forward = "forward"
    reverse = "reverse"


OBJECTIVES = {Objective.forward: _objective_from_logs, Objective.reverse: _reverse_from_logs}
"""The one dispatch table: objective -> f(log_probs, ref_log_probs, rewards, beta) -> float[...]."""


def policy_tables(policy: nn.Module, prompts: Tensor, reward, dtype=torch.float64) -> tuple[Tensor, Tensor]:
    """The policy's log pi(y | x) and the rewards over its enumerated responses: float[batch n] x2 (detached)."""
    log_probs = varlen.all_log_probs(policy, prompts, dtype).detach()
    return log_probs, varlen.reward_table(policy, prompts, reward).to(log_probs)


def policy_optimum(reference: nn.Module, prompts: Tensor, reward, beta: float) -> Tensor:
    """pi* of a reference policy over its enumerated responses: float64[batch n]."""
    ref_log_probs, rewards = policy_tables(reference, prompts, reward)
    return log_optimum(ref_log_probs, rewards, beta).exp()


def policy_objective(policy: nn.Module, reference: nn.Module, prompts: Tensor, reward, beta: float) -> Tensor:
    """J_beta(pi_policy) with pi_ref = `reference`: float64[batch], differentiable in the policy."""
    ref_log_probs, rewards = policy_tables(reference, prompts, reward)
    return _objective_from_logs(varlen.all_log_probs(policy, prompts, torch.float64), ref_log_probs, rewards, beta)


def kl_to_optimum(policy: nn.Module, reference: nn.Module, prompts: Tensor, reward, beta: float) -> Tensor:
    """KL(pi_policy || pi*) per prompt: float64[batch] (= objective_gap / beta, claim 26)."""
    ref_log_probs, rewards = policy_tables(reference, prompts, reward)
    log_probs = varlen.all_log_probs(policy, prompts, torch.float64).detach()
    return (log_probs.exp() * (log_probs - log_optimum(ref_log_probs, rewards, beta))).sum(dim=-1)


def objective_gap(policy: nn.Module, reference: nn.Module, prompts: Tensor, reward, beta: float) -> Tensor:
    """J_beta(pi*) - J_beta(pi_policy) per prompt: float64[batch], >= 0."""
    ref_log_probs, rewards = policy_tables(reference, prompts, reward)
    best = beta * torch.logsumexp(ref_log_probs + rewards / beta, dim=-1)
    return best - policy_objective(policy, reference, prompts, reward, beta).detach()


@dataclass(frozen=True)
class AscentConfig:
    """Exact gradient ascent of the mean over prompts of J_beta on the policy's parameters (float64, L-BFGS
    with a strong-Wolfe line search), run in windows of `window` iterations. Stopping rule: converged when a
    window raises the mean J_beta by at most `relative_tolerance` x max(|J_beta|, 1), or when every partial
    derivative is at most `grad_tolerance`; not converged when `max_iterations` are spent first. The
    relative rule stops where the ascent only creeps along a flat valley (on the lecture's policies,
    about 1e-10 per 50 iterations after the first few hundred)."""

    max_iterations: int = 3000
    """L-BFGS iterations at most (each evaluates J_beta and its gradient about once, a line search more)"""
    window: int = 50
    """iterations between two checks of the stopping rule"""
    relative_tolerance: float = 1e-8
    """converged when a window gains at most this times max(|J_beta|, 1)"""
    grad_tolerance: float = 1e-10
    """converged when every partial derivative of the mean J_beta is at most this in absolute value"""
    history: int = 50
    """L-BFGS memory (pairs of past steps)"""
    starts: int = 4
    """ascents run, the best kept: the first from the given policy, the others from its parameters plus
    `start_scale` x N(0, 1) noise drawn from a generator seeded with `seed`"""
    start_scale: float = 1.0
    seed: int = 0


@dataclass(frozen=True)
class BestInClass:
    """The result of `best_in_class`."""

    policy: nn.Module
    """the policy at the end of the ascent (a float64 copy; the input is untouched)"""
    objective: Tensor
    """J_beta per prompt there: float64[batch]"""
    converged: bool
    """whether the stopping rule of `AscentConfig` held before its iteration limit"""
    iterations: int
    grad_max: float
    """the largest |dJ/dtheta| at the end"""
    start_objectives: tuple[float, ...] = ()
    """the mean J_beta each start ended at (the best is `objective`'s mean): how far apart the local maxima are"""


def best_in_class(policy: nn.Module, prompts: Tensor, reward, beta: float, reference: nn.Module | None = None,
                  config: AscentConfig = AscentConfig(), objective: Objective | str = Objective.forward) -> BestInClass:
    """Maximise the mean J_beta (or the reverse J'_beta) over prompts within the policy's class: the best of
    `config.starts` local ascents.

    `reference` is pi_ref (default: `policy` itself, the reference frozen at the initial policy, as in
    training). J_beta is not concave in the parameters, so each ascent ends at a stationary point near its
    start (when converged); the best of them is at most J_beta(pi*) per prompt, and may be below the class's best.
    """
    _check_beta(beta)
    ref_log_probs, rewards = policy_tables(policy if reference is None else reference, prompts, reward)
    generator = torch.Generator().manual_seed(config.seed)
    results = []
    for start in range(config.starts):
        model = copy.deepcopy(policy).double().requires_grad_(True)
        if start > 0:
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(config.start_scale * torch.randn(p.shape, generator=generator, dtype=p.dtype))
        results.append(_ascend(model, prompts, ref_log_probs, rewards, beta, config, OBJECTIVES[Objective(objective)]))
    best = max(results, key=lambda r: float(r.objective.mean()))
    return BestInClass(best.policy, best.objective, best.converged, best.iterations, best.grad_max,
                       tuple(float(r.objective.mean()) for r in results))


def _ascend(model: nn.Module, prompts: Tensor, ref_log_probs: Tensor, rewards: Tensor, beta: float,
            config: AscentConfig, objective_of=_objective_from_logs) -> BestInClass:
    """One L-BFGS ascent of the mean objective from `model`'s parameters (changed in place)."""
    params = list(model.parameters())
    optimizer = torch.optim.LBFGS(params, lr=1.0, max_iter=config.window, history_size=config.history,
                                  tolerance_grad=config.grad_tolerance, tolerance_change=0.0,
                                  line_search_fn="strong_wolfe")

    def negative_objective() -> Tensor:
        optimizer.zero_grad()
        value = -objective_of(varlen.all_log_probs(model, prompts), ref_log_probs, rewards, beta).mean()
        value.backward()
        return value

    value, converged, iterations = float(negative_objective().detach()), False, 0
    while not converged and iterations < config.max_iterations:
        optimizer.step(negative_objective)
        iterations = int(optimizer.state[params[0]]["n_iter"])
        previous, value = value, float(negative_objective().detach())
        grad_max = max(float(p.grad.abs().max()) for p in params)
        converged = previous - value <= config.relative_tolerance * max(abs(value), 1.0) or \
            grad_max <= config.grad_tolerance
    with torch.no_grad():
        objective = objective_of(varlen.all_log_probs(model, prompts), ref_log_probs, rewards, beta)
    return BestInClass(model.requires_grad_(False), objective, converged, iterations, grad_max)
