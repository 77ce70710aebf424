"""Claim 18: a logit change dz moves a softmax's entropy by -Cov_{a~pi}(log pi(a), dz(a)), to first order.

    H = -sum_a pi(a) log pi(a),   d pi(a) = pi(a) (dz(a) - E_pi[dz])
    dH = -sum_a d pi(a) (log pi(a) + 1) = -Cov_pi(log pi, dz)            (sum_a d pi(a) = 0)

Source: Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models" (arXiv 2505.22617), section 3. On a tabular softmax (one free logit per token) the exact
policy-gradient step of J = E_pi[r] is dz(a) = eta pi(a) A(a) with A = r - J, so
dH = -eta Cov(log pi, pi A): entropy falls when the likely tokens have positive advantage. Both are
checked exactly here: the lab's policy takes one small step along the exact grad J
(lab.exact.expected_reward) and the exact entropy change of every position is compared with the
covariance of its actual logit change; the error is second order, so the relative error shrinks
linearly with the step. Mutants: the opposite sign, and the tabular step without its pi(a) factor.
"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.exact.enumeration import expected_reward, flat_grad
from lab.policies.factorized import Policy
from lab.policies.sampling import entropy
from tasks import sorting

STEPS = (1e-2, 1e-3, 1e-4)
"""Step lengths eta; each is ten times smaller than the one before."""


def covariance_prediction(logits: torch.Tensor, dz: torch.Tensor, sign: float = -1.0) -> torch.Tensor:
    """sign * Cov_{a~pi}(log pi(a), dz(a)) over the last axis (the claim: sign = -1)."""
    log_pi = torch.log_softmax(logits, dim=-1)
    pi = log_pi.exp()
    mean_log, mean_dz = (pi * log_pi).sum(-1, keepdim=True), (pi * dz).sum(-1, keepdim=True)
    return sign * (pi * (log_pi - mean_log) * (dz - mean_dz)).sum(-1)


def relative_errors_of_a_policy_step(sign: float) -> list[float]:
    """max over positions of |dH - prediction| / max |dH| after a step of length eta along grad J."""
    prompts = sorting.lecture_prompts()
    policy = Policy(5, 3, 3, generator=torch.Generator().manual_seed(5), init_scale=0.5).double()
    reward = sorting.inclusion_ordering_reward
    grad = flat_grad(expected_reward(policy, prompts, reward).sum(), policy)
    direction = grad / grad.norm()
    start = {name: p.detach().clone() for name, p in policy.named_parameters()}
    with torch.no_grad():
        before = policy(prompts)  # float[batch pos vocab]
    errors = []
    for eta in STEPS:
        with torch.no_grad():
            offset = 0
            for name, p in policy.named_parameters():
                p.copy_(start[name] + eta * direction[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
            after = policy(prompts)
        change = entropy(after) - entropy(before)  # the exact entropy change, float[batch pos]
        predicted = covariance_prediction(before, after - before, sign)
        errors.append(float((change - predicted).abs().max() / change.abs().max()))
    return errors


def shrinks_linearly(errors: list[float]) -> bool:
    """Each 10x smaller step leaves a 10x smaller relative error (between 5x and 20x)."""
    return all(0.05 < small / large < 0.2 for large, small in zip(errors, errors[1:]))


def test_claim_18_entropy_change_of_a_policy_gradient_step_is_minus_the_covariance():
    """On the lab's policy (lecture prompts, seed 5, init scale 0.5, float64), a step of length eta along
    the exact grad J changes every position's exact entropy by -Cov_pi(log pi, dz) up to O(eta^2): the
    relative error falls tenfold with every tenfold smaller step, and is below 1% at the smallest.

    Claim 18 (Cui et al. 2025). Mutant: +Cov (the wrong sign) is off by about twice the change at
    every step length.
    """
    errors = relative_errors_of_a_policy_step(sign=-1.0)
    assert shrinks_linearly(errors) and errors[-1] < 1e-2, errors
    mutant = relative_errors_of_a_policy_step(sign=+1.0)
    assert not shrinks_linearly(mutant) and min(mutant) > 1.5, mutant


def tabular_step(logits: torch.Tensor, rewards: torch.Tensor, eta: float, weighted: bool = True):
    """The exact entropy change of one tabular policy-gradient step, its claimed value, and the gradient."""
    z = logits.clone().requires_grad_(True)
    pi = torch.softmax(z, -1)
    objective = (pi * rewards).sum()
    (grad,) = torch.autograd.grad(objective, z)
    pi = pi.detach()
    advantage = rewards - objective.detach()
    claimed_dz = eta * (pi * advantage if weighted else advantage)
    change = entropy(logits + eta * grad) - entropy(logits)
    return change, covariance_prediction(logits, claimed_dz), grad, pi * advantage


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(2, 6), scale=st.sampled_from([0.5, 2.0, 4.0]))
def test_claim_18_tabular_softmax_step_is_pi_times_advantage(seed, vocab, scale):
    """On a tabular softmax, grad_z E_pi[r] = pi(a) A(a) exactly, and dH = -eta Cov(log pi, pi A) to first
    order (relative error below 1e-3 at eta = 1e-4 wherever the change is not negligible).

    Claim 18 (Cui et al. 2025, the tabular case). Mutant: dz = eta A (no pi factor) misses the change.
    """
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab, generator=generator, dtype=torch.float64) * scale
    rewards = torch.randn(vocab, generator=generator, dtype=torch.float64)
    change, predicted, grad, pi_advantage = tabular_step(logits, rewards, 1e-4)
    assert torch.allclose(grad, pi_advantage, rtol=1e-12, atol=1e-15)
    if abs(float(predicted)) > 1e-9:
        assert abs(float(change - predicted)) < 1e-3 * abs(float(predicted))


def test_claim_18_entropy_falls_when_likely_tokens_have_positive_advantage():
    """pi = softmax([3, 1, 0, 0]). Rewarding the likely token (A > 0 where pi is large) lowers the entropy;
    rewarding a rare token (A < 0 on the likely one) raises it; in both the sign and size are
    -eta Cov(log pi, pi A).

    Claim 18 (Cui et al. 2025). Mutant: the unweighted step dz = eta A predicts a change several
    times too large.
    """
    logits = torch.tensor([3.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    likely_rewarded = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    rare_rewarded = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    eta = 1e-4
    falls, falls_predicted, _, _ = tabular_step(logits, likely_rewarded, eta)
    rises, rises_predicted, _, _ = tabular_step(logits, rare_rewarded, eta)
    assert falls < 0 < rises
    assert abs(float(falls / falls_predicted) - 1) < 1e-3 and abs(float(rises / rises_predicted) - 1) < 1e-3
    for rewards in (likely_rewarded, rare_rewarded):
        change, unweighted, _, _ = tabular_step(logits, rewards, eta, weighted=False)
        assert abs(float(change / unweighted) - 1) > 0.5
