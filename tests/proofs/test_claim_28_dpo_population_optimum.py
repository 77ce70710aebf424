"""Claim 28 (docs/claims.md): where the population DPO loss has its minimum, for pairs drawn from pi_ref.

Tabular logits theta over a prompt's enumerated responses (pi = softmax(theta) can be any full-support
distribution); the loss is `lab.exact.pairs.population_dpo_loss`, an exact sum over every pair. It
depends on theta only through h(a, b) = (theta_a - theta_b) - (log pi_ref(a) - log pi_ref(b)), and the
sigmoid loss is convex in theta, so a stationary point is a global minimiser.

- Bradley-Terry (y_1 wins with probability sigmoid(r_1 - r_2)): pi* = pi_ref exp(r / beta) / Z is a
  stationary point (Rafailov et al. 2023, section 4: the loss is the likelihood of the preferences,
  maximised where beta h = r_w - r_l).
- argmax (the higher reward always wins, ties dropped): every term -log sigmoid(beta h) > 0, yet along
  pi_c = pi_ref exp(c r) / Z_c the loss falls to 0 as c grows and the losers' probabilities go to 0: no
  finite minimiser (Azar et al. 2023, section 4.2). KL(pi_c || pi_ref) rises to -log pi_ref(top set),
  the same for every beta: on a finite space the KL stays finite, but beta no longer sets it.
- with tied best responses the argmax flow (exact gradient flow from pi_ref, tabular logits) ends on the top set at
  pi proportional to pi_ref^(1 + 1/beta): its KL exceeds -log pi_ref(top set), and beta sets it.
- IPO's (h - 1/(2 beta))^2 is a convex quadratic in theta, strictly so across the responses the pairs
  connect: one finite minimiser (Azar et al. 2023, section 5), which is not pi*.
"""

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from tests.proofs.proof_tools import TOL, close

from lab.exact import optimum as O
from lab.exact import varlen
from lab.exact.flow import FlowConfig, descend
from lab.exact.pairs import population_dpo_loss
from lab.policies import make_policy

PROMPT = torch.tensor([[0, 1]])

cases = dict(seed=st.integers(0, 2**31 - 1), kind=st.sampled_from(["factorized", "autoregressive"]),
             vocab=st.integers(2, 3), length=st.integers(1, 2), beta=st.sampled_from([0.05, 0.3, 1.0, 4.0]))


def table(seed, kind, vocab, length, init_scale=1.0):
    """log pi_ref float64[n] of a lab policy's enumerated responses, and integer rewards float64[n] (>= 2 levels)."""
    reference = make_policy(kind, vocab, 2, length, 3, torch.Generator().manual_seed(seed), init_scale).double()
    ref_log_probs = varlen.all_log_probs(reference, PROMPT).detach()[0]
    rewards = torch.randint(0, 4, ref_log_probs.shape, generator=torch.Generator().manual_seed(seed + 1)).double()
    assume(len(rewards.unique()) >= 2)
    return ref_log_probs, rewards


def gradient(theta, ref_log_probs, rewards, beta, preference, loss_type="sigmoid"):
    theta = theta.detach().requires_grad_(True)
    loss = population_dpo_loss(torch.log_softmax(theta, -1), ref_log_probs, rewards, beta, preference, loss_type)
    return torch.autograd.grad(loss, theta)[0]


@given(**cases)
def test_claim_28_under_bradley_terry_pi_star_is_a_stationary_point_of_the_population_dpo_loss(
        seed, kind, vocab, length, beta):
    """The exact gradient over all pairs vanishes at pi* under Bradley-Terry preferences, and (convexity) no
    other distribution has a lower loss. Mutant: under argmax preferences the gradient at pi* does not vanish."""
    ref_log_probs, rewards = table(seed, kind, vocab, length)
    star = O.log_optimum(ref_log_probs, rewards, beta)
    assert close(gradient(star, ref_log_probs, rewards, beta, "bradley-terry"), torch.zeros_like(star))
    loss = lambda theta, preference: population_dpo_loss(torch.log_softmax(theta, -1), ref_log_probs,  # noqa: E731
                                                         rewards, beta, preference)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(5):
        other = star + torch.randn(star.shape, generator=generator, dtype=torch.float64)
        assert float(loss(other, "bradley-terry")) >= float(loss(star, "bradley-terry")) - TOL.atol

    assert not close(gradient(star, ref_log_probs, rewards, beta, "argmax"), torch.zeros_like(star))


@given(**cases)
def test_claim_28_under_argmax_preferences_the_dpo_loss_falls_to_zero_as_the_losers_vanish(
        seed, kind, vocab, length, beta):
    """Along pi_c = pi_ref exp(c r) / Z_c the argmax population loss is strictly decreasing, positive, and
    below 1e-12 once beta c >= 32, while the losers' mass goes to 0 and KL(pi_c || pi_ref) approaches
    -log pi_ref(top set), which does not depend on beta and exceeds KL(pi* || pi_ref) at this beta.
    Mutant: IPO's loss along the same path is not decreasing (it grows without bound)."""
    ref_log_probs, rewards = table(seed, kind, vocab, length)
    path = torch.tensor([0.0] + [2.0 ** k for k in range(-3, 6)], dtype=torch.float64) / beta  # beta c up to 32
    thetas = [ref_log_probs + c * rewards for c in path]
    losses = torch.stack([population_dpo_loss(torch.log_softmax(t, -1), ref_log_probs, rewards, beta, "argmax")
                          for t in thetas])
    assert bool((losses[1:] < losses[:-1]).all()) and bool((losses > 0).all()) and float(losses[-1]) < 1e-12

    top = rewards == rewards.max()
    last = torch.softmax(ref_log_probs + 200.0 * rewards, -1)  # far along the path: the losers are gone
    assert float(last[~top].sum()) < 1e-9
    limit = -torch.logsumexp(ref_log_probs[top], -1)  # -log pi_ref(top set)
    assert abs(float(O.kl_divergence(last, ref_log_probs.exp())) - float(limit)) < 1e-6
    star = O.kl_regularized_optimum(ref_log_probs.exp(), rewards, beta)
    star_kl = float(O.kl_divergence(star, ref_log_probs.exp()))
    assert star_kl <= float(limit) + TOL.atol
    if float(star[~top].sum()) > 1e-6:  # pi* still keeps some mass off the top set: strictly closer to pi_ref
        assert star_kl < float(limit) - 1e-12

    ipo = torch.stack([population_dpo_loss(torch.log_softmax(t, -1), ref_log_probs, rewards, beta, "argmax", "ipo")
                       for t in thetas])
    assert not bool((ipo[1:] < ipo[:-1]).all())
    assert float(ipo[-1]) > float(ipo[0])


@given(**cases, preference=st.sampled_from(["argmax", "bradley-terry"]))
def test_claim_28_ipo_population_loss_has_a_finite_minimiser(seed, kind, vocab, length, beta, preference):
    """IPO's population loss is a quadratic in the free logits theta_1..n-1 (theta_0 = 0) with a positive
    definite Hessian, so one Newton step from pi_ref lands on its unique, finite minimiser: the gradient
    vanishes there and random moves only raise the loss. Mutant: "IPO's minimiser is pi*" (the gradient of
    IPO's loss at pi* does not vanish)."""
    # pairs weigh pi_ref(a) pi_ref(b): a flatter reference keeps the Hessian's conditioning within float64
    ref_log_probs, rewards = table(seed, kind, vocab, length, init_scale=0.5)
    assume(float(ref_log_probs.min()) > -12.0)

    def loss(free):
        theta = torch.cat([torch.zeros(1, dtype=free.dtype), free])
        return population_dpo_loss(torch.log_softmax(theta, -1), ref_log_probs, rewards, beta, preference, "ipo")

    start = (ref_log_probs - ref_log_probs[0])[1:]
    hessian = torch.autograd.functional.hessian(loss, start)
    eigenvalues = torch.linalg.eigvalsh(hessian)
    assert float(eigenvalues.min()) > 1e-10 * float(eigenvalues.max()) > 0  # far above float64 rounding
    grad = torch.autograd.functional.jacobian(loss, start)
    minimiser = start - torch.linalg.solve(hessian, grad)
    assert bool(torch.isfinite(minimiser).all())
    assert float(torch.autograd.functional.jacobian(loss, minimiser).abs().max()) < 1e-8
    generator = torch.Generator().manual_seed(seed)
    for _ in range(5):
        moved = minimiser + 0.1 * torch.randn(minimiser.shape, generator=generator, dtype=torch.float64)
        assert float(loss(moved)) > float(loss(minimiser))

    star = O.log_optimum(ref_log_probs, rewards, beta)
    assert not close(gradient(star, ref_log_probs, rewards, beta, preference, "ipo"), torch.zeros_like(star))


TIED = [  # pi_ref over 4 or 5 responses, rewards with the best level shared by 2 or 3 of them
    (torch.tensor([0.4, 0.1, 0.3, 0.2]), torch.tensor([1.0, 1.0, 0.0, 0.0])),
    (torch.tensor([0.05, 0.25, 0.3, 0.15, 0.25]), torch.tensor([2.0, 0.0, 2.0, 1.0, 2.0])),
]


@pytest.mark.parametrize("case", range(len(TIED)))
@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0])
def test_claim_28_with_tied_best_responses_the_argmax_flow_ends_at_pi_ref_to_the_power_1_plus_1_over_beta(case, beta):
    """Under argmax preferences with several best responses (a tie at the top, at least two reward levels), the
    exact gradient flow of the population DPO loss in tabular logits, from pi_ref, drives the losers to 0 and
    ends on the top set at pi proportional to pi_ref^(1 + 1/beta): there -log sigmoid(beta h) ~ exp(-beta h),
    so d exp(beta theta_y) / dt is proportional to pi_ref(y)^(1 + beta) for every top y. Its KL to pi_ref is
    -log pi_ref(top set) + KL(that || pi_ref restricted to the top set): above -log pi_ref(top set), and set
    by beta. Derived here (the flow: `lab.exact.flow.descend`, to loss 1e-12). Mutant: "the flow ends at
    pi_ref restricted to the top set" (the limit of the path pi_c = pi_ref exp(c r) / Z_c, whose KL is
    -log pi_ref(top set) for every beta) fails."""
    ref_probs, rewards = (t.double() for t in TIED[case])
    ref_log_probs = ref_probs.log()
    loss = lambda theta: population_dpo_loss(torch.log_softmax(theta, -1), ref_log_probs, rewards, beta,  # noqa: E731
                                             "argmax")
    end = descend(loss, ref_log_probs, FlowConfig(loss_tolerance=1e-12))
    assert end.converged
    pi = torch.softmax(end.theta, -1)
    top = rewards == rewards.max()
    assert float(pi[~top].sum()) < 1e-4  # about loss^(1 / beta)
    on_top = pi[top] / pi[top].sum()
    limit = ref_probs[top] ** (1 + 1 / beta) / (ref_probs[top] ** (1 + 1 / beta)).sum()
    assert torch.allclose(on_top, limit, rtol=1e-3, atol=1e-6)
    kl = float(O.kl_divergence(pi, ref_probs))
    below = -float(ref_probs[top].sum().log())  # -log pi_ref(top set)
    assert kl > below + 1e-3
    assert abs(kl - (below + float(O.kl_divergence(limit, ref_probs[top] / ref_probs[top].sum())))) < 1e-3

    restricted = ref_probs[top] / ref_probs[top].sum()
    assert not torch.allclose(on_top, restricted, rtol=1e-3, atol=1e-6)
