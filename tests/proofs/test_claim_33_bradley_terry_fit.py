"""Claim 33 (docs/claims.md): Bradley-Terry maximum likelihood on every pair recovers the reward up to a constant.

A tabular reward model (one free score phi(y) per response of a prompt) fitted by the population
Bradley-Terry loss over every pair drawn from a full-support pi (`lab.exact.preference_fit`), with
labels P(a preferred to b) = sigmoid((r_a - r_b) / T): the loss is convex, its gradient vanishes
exactly at phi = r / T + c for every constant c, and its Hessian's null space is the constants alone,
so these are its only minimisers (Bradley and Terry 1952; the reward-model objective of Ouyang et al.
2022, eq. 1; Rafailov et al. 2023, section 4, for the same identifiability up to a per-prompt constant).
"""

import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from tests.proofs.proof_tools import close

from lab.exact.preference_fit import population_bt_loss

cases = dict(seed=st.integers(0, 2**31 - 1), size=st.integers(2, 7), temperature=st.sampled_from([0.5, 1.0, 3.0]),
             shift=st.floats(-5, 5))


def table(seed, size):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(1, size, generator=g, dtype=torch.float64), -1)
    rewards = torch.randint(0, 4, (1, size), generator=g).double()
    return probs, rewards


def gradient_and_hessian(scores, probs, rewards, temperature):
    loss = lambda phi: population_bt_loss(phi.unsqueeze(0), probs, rewards, temperature).sum()  # noqa: E731
    phi = scores[0].detach().requires_grad_(True)
    return torch.autograd.functional.jacobian(loss, phi), torch.autograd.functional.hessian(loss, phi)


@given(**cases)
def test_claim_33_bradley_terry_fit_recovers_the_reward_up_to_a_constant(seed, size, temperature, shift):
    """At phi = r / T + c the exact gradient is 0 (to 1e-12) for any c, and the Hessian there is positive
    semi-definite with exactly one zero eigenvalue, along the constants: no other minimiser. Mutant: with
    argmax labels (the higher reward always wins) the gradient at the same phi does not vanish."""
    probs, rewards = table(seed, size)
    assume(len(rewards.unique()) >= 2)
    scores = rewards / temperature + shift
    grad, hessian = gradient_and_hessian(scores, probs, rewards, temperature)
    assert close(grad, torch.zeros_like(grad))
    eigenvalues = torch.linalg.eigvalsh(hessian)
    assert float(eigenvalues[0]) > -1e-12 and abs(float(eigenvalues[0])) < 1e-12 and float(eigenvalues[1]) > 1e-9
    assert close(hessian @ torch.ones(size, dtype=torch.float64), torch.zeros(size, dtype=torch.float64))

    argmax_grad, _ = gradient_and_hessian(scores, probs, rewards, None)
    assert not close(argmax_grad, torch.zeros_like(argmax_grad))
