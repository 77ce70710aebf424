"""KL estimators, the penalty and the reference policy (claim 6 in docs/claims.md).

With the sampled token's probabilities p = pi_theta(y), p_ref = pi_ref(y) and rho = p_ref / p:
    k1 = -log rho,  k2 = (log rho)^2 / 2,  k3 = rho - log rho - 1;
    penalty = beta * mean over (batch, trial) of sum over pos of k3.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.core.kl import ESTIMATORS, freeze, k1, k2, k3, kl_estimate, kl_penalty, reference_due
from lab.policies.factorized import Policy, PolicyStack

FORMULAS = {
    "k1": lambda rho: -math.log(rho),
    "k2": lambda rho: 0.5 * math.log(rho) ** 2,
    "k3": lambda rho: rho - math.log(rho) - 1,
}


@pytest.mark.parametrize("name", sorted(FORMULAS))
@given(seed=st.integers(0, 2**31), lead=st.sampled_from([(), (2,)]))
def test_estimators_match_their_formulas_in_probabilities(name, seed, lead):
    """k1, k2, k3 (log_probs, ref_log_probs) -> float[... batch trial pos] per token."""
    g = torch.Generator().manual_seed(seed)
    shape = (*lead, 2, 3, 4)
    p = torch.rand(shape, generator=g, dtype=torch.float64) * 0.98 + 0.01
    p_ref = torch.rand(shape, generator=g, dtype=torch.float64) * 0.98 + 0.01
    out = {"k1": k1, "k2": k2, "k3": k3}[name](p.log(), p_ref.log())
    assert out.shape == shape
    expected = torch.tensor([FORMULAS[name](b / a) for a, b in zip(p.flatten().tolist(), p_ref.flatten().tolist())],
                            dtype=torch.float64).reshape(shape)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("dtype, resolution", [(torch.float32, 1e-3), (torch.float64, 1e-7)])
def test_k3_is_nonnegative_and_zero_exactly_at_rho_one(dtype, resolution):
    """Claim 6 (docs/claims.md): f(rho) = rho - log rho - 1 >= 0, with equality iff rho = 1.

    Checked on a dense grid of log rho in [-30, 30] including values down to 1e-12, where a naive
    exp(x) - x - 1 rounds below zero in float32. `resolution` is the smallest |log rho| at which the
    dtype can still tell f apart from 0 (f ~ x^2 / 2).
    """
    magnitudes = torch.logspace(-12, math.log10(30), 20001, dtype=dtype)
    log_rho = torch.cat([-magnitudes, torch.zeros(1, dtype=dtype), magnitudes])
    value = k3(torch.zeros_like(log_rho), log_rho)
    assert (value >= 0).all(), f"k3 < 0 at log rho = {log_rho[value < 0][:5].tolist()}"
    assert value[log_rho == 0].item() == 0.0
    assert (value[log_rho.abs() >= resolution] > 0).all()


def test_k1_can_be_negative_while_k2_and_k3_cannot():
    """Claim 6 (docs/claims.md): the naive -log rho is negative wherever pi_ref > pi_theta on the sampled token."""
    log_probs, ref = torch.log(torch.tensor([0.2])), torch.log(torch.tensor([0.6]))
    assert k1(log_probs, ref).item() < 0
    assert k2(log_probs, ref).item() > 0 and k3(log_probs, ref).item() > 0


def test_k3_and_k1_average_to_the_exact_kl_on_policy():
    """Claim 6 (docs/claims.md): with y ~ pi_theta, E[k3] = E[k1] = KL(pi_theta || pi_ref) exactly (enumerated)."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    p_ref = torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=torch.float64)
    kl = (p * (p / p_ref).log()).sum()
    for estimator in (k1, k3):
        torch.testing.assert_close((p * estimator(p.log(), p_ref.log())).sum(), kl)
    assert (p * (p_ref / p - 1)).sum().abs() < 1e-15  # claim 8 (docs/claims.md): E[rho - 1] = 0


def test_penalty_is_beta_times_k3_summed_over_positions_and_averaged_over_batch_and_trial():
    """The penalty is beta * mean_{batch, trial} sum_pos k3, per leading index (docs/task.md)."""
    g = torch.Generator().manual_seed(7)
    log_probs = -torch.rand(3, 2, 4, 5, generator=g, dtype=torch.float64)  # run batch trial pos
    ref = -torch.rand(3, 2, 4, 5, generator=g, dtype=torch.float64)
    beta = torch.tensor([0.0, 0.1, 2.0], dtype=torch.float64)
    penalty = kl_penalty(log_probs, ref, beta)
    assert penalty.shape == (3,)
    for r in range(3):
        total = 0.0
        for b in range(2):
            for t in range(4):
                total += sum(FORMULAS["k3"](math.exp(ref[r, b, t, q] - log_probs[r, b, t, q])) for q in range(5))
        assert penalty[r].item() == pytest.approx(beta[r].item() * total / (2 * 4), rel=1e-12)
    assert kl_penalty(log_probs[0], ref[0], 0.5).item() == pytest.approx(0.5 * kl_estimate(log_probs[0], ref[0]).item())


@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
def test_kl_estimate_uses_the_named_estimator(name):
    g = torch.Generator().manual_seed(8)
    log_probs, ref = -torch.rand(2, 3, 4, generator=g), -torch.rand(2, 3, 4, generator=g)
    expected = ESTIMATORS[name](log_probs, ref).sum(-1).mean()
    torch.testing.assert_close(kl_estimate(log_probs, ref, name), expected)
    with pytest.raises(ValueError):
        kl_estimate(log_probs, ref, "k4")


@pytest.mark.parametrize("make", [
    lambda: Policy(5, 3, 3, dim=4, generator=torch.Generator().manual_seed(0)),
    lambda: PolicyStack(5, 3, 3, 4, [torch.Generator().manual_seed(s) for s in (0, 1)]),
])
def test_freeze_makes_a_frozen_copy_unaffected_by_later_updates(make):
    """The reference is a frozen copy (the lecture's model.clone() does not exist)."""
    policy = make()
    prompts = torch.tensor([[1, 0, 2], [3, 2, 4]])
    before = policy(prompts).detach()
    reference = freeze(policy)
    assert torch.equal(reference(prompts), before)
    assert all(not p.requires_grad for p in reference.parameters())
    assert all(p.requires_grad for p in policy.parameters())  # the original still trains
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    policy(prompts).logsumexp(-1).sum().backward()
    optimizer.step()
    assert not torch.equal(policy(prompts), before)
    assert torch.equal(reference(prompts), before)
    assert reference(prompts).grad_fn is None


@pytest.mark.parametrize("kl_period, due", [
    (10, [0, 10, 20, 30]),
    (3, [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30]),
    (1, list(range(31))),
    (0, [0]),  # frozen once at the start: the chapter's static anchor
])
def test_reference_schedule(kl_period, due):
    """The reference is refrozen every kl_period epochs; kl_period 0 freezes it once."""
    assert [epoch for epoch in range(31) if reference_due(epoch, kl_period)] == due
