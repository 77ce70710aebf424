"""Surrogate losses (docs/task.md; claims 9, 10, 15 in docs/claims.md).

The reference below is written element by element from the formulas of lab/core/losses.py, with N = batch*trial*pos:
    naive      L = -1/N sum l d                           dL/dl = -d / N
    unclipped  L = -1/N sum rho d,  rho = exp(l - l_old)  dL/dl = -rho d / N
    clipped    L = -1/N sum min(rho d, clip(rho, 1-eps, 1+eps) d)
               dL/dl = -rho d / N where the unclipped term is the minimum (always inside the band), else 0
    cispo      L = -1/N sum min(rho, eps_max) d l             dL/dl = -min(rho, eps_max) d / N  (the weight constant)
    sapo       L = -1/N sum (4/tau) sigmoid(tau (rho - 1)) d  dL/dl = -4 s (1 - s) rho d / N, s the sigmoid
    luspo      the clipped loss on s_i = exp(mean_q (l - l_old)) for every token of response i;
               dL/dl_q = -s_i d / N where the unclipped term is the minimum, else 0 (P tokens, each 1/P of d s_i)
    vespo      L = -1/N sum phi(w_i) d l, w_i = exp(sum_q (l - l_old)), phi(w) = exp(lam + k log w - lam w)
               with (k, lam) = (2, 3) where d >= 0 else (3, 2);  dL/dl = -phi(w_i) d / N  (phi constant)
The descendants' settings are TRL's defaults (eps_max = clip_eps where not given, tau_pos 1, tau_neg 1.05).
"""

import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.core.losses import SURROGATES, clip_fractions, compute_loss, parse_mode, ratios
from lab.core.modes import TrainingLoss


def reference_loss_and_grad(mode: str, l: list, d: list, old: list, eps: float) -> tuple[float, list]:
    """One leading index: l, old float[batch][trial][pos] and d float[batch][trial] as nested lists."""
    cells = [(b, t, q) for b in range(len(l)) for t in range(len(l[0])) for q in range(len(l[0][0]))]
    n = len(cells)
    value, grad = 0.0, [[[0.0] * len(l[0][0]) for _ in l[0]] for _ in l]
    for b, t, q in cells:
        lp, delta = l[b][t][q], d[b][t]
        if mode == "naive":
            value += -lp * delta / n
            grad[b][t][q] = -delta / n
            continue
        rho = math.exp(lp - old[b][t][q])
        positions = len(l[b][t])
        if mode in ("luspo", "vespo"):  # one ratio per response: the mean (luspo) or the sum (vespo) of log-ratios
            total = sum(l[b][t][p] - old[b][t][p] for p in range(positions))
            rho = math.exp(total / positions) if mode == "luspo" else rho
        if mode == "cispo":
            weight = min(rho, eps)
            value += -weight * delta * lp / n
            grad[b][t][q] = -weight * delta / n
            continue
        if mode == "sapo":
            tau = 1.0 if delta > 0 else 1.05
            s = 1 / (1 + math.exp(-tau * (rho - 1)))
            value += -(4 / tau) * s * delta / n
            grad[b][t][q] = -4 * s * (1 - s) * rho * delta / n
            continue
        if mode == "vespo":
            log_w = min(max(total, math.log(1e-8)), 20.0)
            k, lam = (2.0, 3.0) if delta >= 0 else (3.0, 2.0)
            phi = math.exp(lam + k * log_w - lam * math.exp(log_w))
            value += -phi * delta * lp / n
            grad[b][t][q] = -phi * delta / n
            continue
        if mode == "unclipped":
            value += -rho * delta / n
            grad[b][t][q] = -rho * delta / n
            continue
        if mode in ("clipped", "luspo"):  # luspo: PPO's clip on the response's ratio (above)
            clipped = min(max(rho, 1 - eps), 1 + eps)
            value += -min(rho * delta, clipped * delta) / n
            unclipped_is_min = rho * delta < clipped * delta or abs(rho - 1) <= eps
            grad[b][t][q] = -rho * delta / n if unclipped_is_min else 0.0
            continue
        raise AssertionError(f"no reference formula for the loss {mode!r}")  # a new loss writes its own above
    return value, grad


@st.composite
def loss_inputs(draw):
    """log_probs, old_log_probs float64[*lead batch trial pos] and deltas float64[*lead batch trial]."""
    lead = draw(st.sampled_from([(), (1,), (3,)]))
    shape = (*lead, draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    spread = draw(st.sampled_from([0.0, 0.003, 0.05, 0.5]))  # how far theta has moved from theta_old
    log_probs = -3 * torch.rand(shape, generator=g, dtype=torch.float64)
    old = log_probs + spread * torch.randn(shape, generator=g, dtype=torch.float64)
    deltas = torch.randn(shape[:-1], generator=g, dtype=torch.float64)
    return log_probs, old, deltas


@pytest.mark.parametrize("mode", list(SURROGATES))
@given(inputs=loss_inputs(), clip_eps=st.sampled_from([0.01, 0.1, 0.3]))
def test_loss_value_and_gradient_match_the_formula(mode, inputs, clip_eps):
    """compute_loss and its gradient equal the formulas of lab/core/losses.py; leading axes are kept."""
    log_probs, old, deltas = inputs
    log_probs.requires_grad_(True)
    loss = compute_loss(log_probs, deltas, mode, old_log_probs=old, clip_eps=clip_eps)
    assert loss.shape == log_probs.shape[:-3]
    loss.sum().backward()
    lead = log_probs.shape[:-3]
    for index in itertools.product(*map(range, lead)):
        value, grad = reference_loss_and_grad(mode.value, log_probs[index].tolist(), deltas[index].tolist(),
                                              old[index].tolist(), clip_eps)
        assert loss[index].item() == pytest.approx(value, rel=1e-9, abs=1e-12)
        torch.testing.assert_close(log_probs.grad[index], torch.tensor(grad, dtype=torch.float64))


@pytest.mark.parametrize("mode", [TrainingLoss.unclipped, TrainingLoss.clipped])
def test_ratio_modes_without_old_log_probs_are_an_error(mode):
    with pytest.raises(ValueError, match=f"{mode.value!r} needs old_log_probs"):
        compute_loss(torch.zeros(1, 2, 3), torch.zeros(1, 2), mode)
    compute_loss(torch.zeros(1, 2, 3), torch.zeros(1, 2), "naive")  # naive needs none


@pytest.mark.parametrize("mode", [TrainingLoss.unclipped, TrainingLoss.clipped])
def test_old_log_probs_never_receive_gradient(mode):
    """Claim 10 (docs/claims.md): the old policy is frozen; even an old tensor that requires grad gets none."""
    g = torch.Generator().manual_seed(0)
    log_probs = (-torch.rand(2, 3, 4, generator=g)).requires_grad_(True)
    old = (log_probs.detach() + 0.2 * torch.randn(2, 3, 4, generator=g)).requires_grad_(True)
    compute_loss(log_probs, torch.randn(2, 3, generator=g), mode, old, clip_eps=0.1).backward()
    assert old.grad is None
    assert log_probs.grad is not None and log_probs.grad.abs().sum() > 0


def test_at_theta_old_all_three_losses_have_the_naive_gradient():
    """Claim 9 (docs/claims.md): at theta = theta_old the ratio is 1 and every surrogate has the naive loss's gradient."""
    g = torch.Generator().manual_seed(1)
    base = -2 * torch.rand(3, 5, 4, generator=g, dtype=torch.float64)
    deltas = torch.randn(3, 5, generator=g, dtype=torch.float64)
    grads = {}
    for mode in SURROGATES:
        log_probs = base.clone().requires_grad_(True)
        compute_loss(log_probs, deltas, mode, old_log_probs=base, clip_eps=0.01).backward()
        grads[mode] = log_probs.grad
    torch.testing.assert_close(grads[TrainingLoss.unclipped], grads[TrainingLoss.naive])
    torch.testing.assert_close(grads[TrainingLoss.clipped], grads[TrainingLoss.naive])


@pytest.mark.parametrize("rho, delta, has_gradient", [
    (1.5, +1.0, False),  # pushed up past 1 + eps already: clipped
    (0.5, -1.0, False),  # pushed down past 1 - eps already: clipped
    (1.5, -1.0, True),   # outside the band on the other side: the gradient stays
    (0.5, +1.0, True),
    (1.005, +1.0, True),  # inside the band
])
def test_clipped_token_outside_the_band_on_its_delta_side_has_no_gradient(rho, delta, has_gradient):
    """Claim 9 (docs/claims.md): a sample whose ratio left [1-eps, 1+eps] in the direction its delta pushes is inert."""
    old = torch.tensor([[[0.0]]])
    log_probs = torch.tensor([[[math.log(rho)]]], requires_grad=True)
    compute_loss(log_probs, torch.tensor([[delta]]), "clipped", old, clip_eps=0.01).backward()
    assert (log_probs.grad.abs().item() > 0) == has_gradient
    low, high = clip_fractions(log_probs, old, torch.tensor([[delta]]), 0.01)
    assert (low + high).item() == (0.0 if has_gradient else 1.0)
    assert low.item() == (1.0 if (rho < 0.99 and delta < 0) else 0.0)


def test_clip_fractions_ignore_tokens_whose_delta_is_zero_but_count_them_in_the_denominator():
    """A token with delta = 0 has no gradient in any loss mode, whatever its ratio: it is never
    'clipped', on either side (TRL's `clip_ratio/*` and verl's `actor/pg_clipfrac` agree). It still
    counts among the tokens, so the fractions are over all tokens. CleanRL's `clipfrac`,
    |ratio - 1| > eps, would count all four tokens below: a different quantity (docs/metrics.md)."""
    old = torch.zeros(1, 4, 1)  # one prompt, four responses of one token, each with its own delta
    rho = torch.tensor([3.0, 0.2, 3.0, 0.2])
    log_probs = rho.log().view(1, 4, 1)
    deltas = torch.tensor([[0.0, 0.0, 1.0, -1.0]])  # far outside the band: the zero-delta tokens too
    low, high = clip_fractions(log_probs, old, deltas, 0.1)
    assert (low.item(), high.item()) == (0.25, 0.25)  # only the two tokens with a delta, out of four
    cleanrl = ((rho - 1).abs() > 0.1).float().mean().item()  # the mutant: ignores the delta's sign and zero
    assert cleanrl == 1.0 != (low + high).item()
    zero = torch.zeros(1, 4)
    assert [f.item() for f in clip_fractions(log_probs, old, zero, 0.1)] == [0.0, 0.0]
    for mode in SURROGATES:  # and indeed none of these tokens moves any loss
        lp = log_probs.clone().requires_grad_()
        compute_loss(lp, zero, mode, old, 0.1).backward()
        assert (lp.grad == 0).all(), mode


@given(inputs=loss_inputs(), clip_eps=st.sampled_from([0.01, 0.1, 0.3]))
def test_clipped_is_never_above_unclipped_and_equal_inside_the_band(inputs, clip_eps):
    """Claim 15 (docs/claims.md): the clipped surrogate's per-token value is <= the unclipped one's (as a loss: >=),
    and where every ratio lies inside the band both losses have the same value and gradient."""
    log_probs, old, deltas = inputs
    rho = ratios(log_probs, old)
    clipped = TrainingLoss.clipped.entry.surrogate(log_probs, deltas.unsqueeze(-1), old, None, clip_eps=clip_eps)
    unclipped = TrainingLoss.unclipped.entry.surrogate(log_probs, deltas.unsqueeze(-1), old, None, clip_eps=clip_eps)
    assert (clipped >= unclipped).all()  # losses are minus the surrogates
    inside = (rho - 1).abs() <= clip_eps
    torch.testing.assert_close(clipped[inside], unclipped[inside])
    if inside.all():
        values, grads = [], []
        for mode in (TrainingLoss.clipped, TrainingLoss.unclipped):
            lp = log_probs.clone().requires_grad_(True)
            loss = compute_loss(lp, deltas, mode, old, clip_eps)
            loss.sum().backward()
            values.append(loss.detach())
            grads.append(lp.grad)
        torch.testing.assert_close(values[0], values[1])
        torch.testing.assert_close(grads[0], grads[1])


def test_inside_the_band_clipped_equals_unclipped_exactly():
    """Claim 15 (docs/claims.md) on a fixed case: ratios within 1 +- eps give identical value and gradient."""
    g = torch.Generator().manual_seed(3)
    old = -torch.rand(2, 4, 3, generator=g, dtype=torch.float64)
    base = old + 0.004 * (2 * torch.rand(2, 4, 3, generator=g, dtype=torch.float64) - 1)  # |log rho| < 0.004
    deltas = torch.randn(2, 4, generator=g, dtype=torch.float64)
    out = {}
    for mode in ("clipped", "unclipped"):
        lp = base.clone().requires_grad_(True)
        loss = compute_loss(lp, deltas, mode, old, clip_eps=0.01)
        loss.backward()
        out[mode] = (loss.detach(), lp.grad)
    torch.testing.assert_close(out["clipped"][0], out["unclipped"][0])
    torch.testing.assert_close(out["clipped"][1], out["unclipped"][1])


def test_per_run_clip_eps_broadcasts_over_the_leading_run_axis():
    """clip_eps float[run] applies run r's eps to run r alone."""
    g = torch.Generator().manual_seed(4)
    old = -torch.rand(3, 2, 5, 3, generator=g)
    log_probs = old + 0.2 * torch.randn(3, 2, 5, 3, generator=g)
    deltas = torch.randn(3, 2, 5, generator=g)
    eps = torch.tensor([0.01, 0.1, 0.5])
    batched = compute_loss(log_probs, deltas, "clipped", old, eps)
    assert batched.shape == (3,)
    for r in range(3):
        alone = compute_loss(log_probs[r], deltas[r], "clipped", old[r], float(eps[r]))
        torch.testing.assert_close(batched[r], alone)
    assert len(set(batched.tolist())) == 3  # the eps really differ in effect
    low, high = clip_fractions(log_probs, old, deltas, eps)
    for r in range(3):
        low_r, high_r = clip_fractions(log_probs[r], old[r], deltas[r], float(eps[r]))
        assert low[r] == low_r and high[r] == high_r


@pytest.mark.parametrize("mode", list(SURROGATES))
def test_mode_may_be_the_enum_or_its_name(mode):
    g = torch.Generator().manual_seed(5)
    log_probs, old, deltas = -torch.rand(2, 3, 2, generator=g), -torch.rand(2, 3, 2, generator=g), torch.randn(2, 3)
    assert torch.equal(compute_loss(log_probs, deltas, mode, old), compute_loss(log_probs, deltas, mode.value, old))


def test_the_surrogates_are_the_policy_gradient_losses_and_others_are_refused():
    """Every policy-gradient `--loss` has a surrogate (the table's entry); `dpo`, `sft` and `expert-iteration` are
    losses of other methods, refused by name, and an unknown name lists the choices."""
    assert SURROGATES == tuple(m for m in TrainingLoss if m.entry.method.value == "policy-gradient")
    assert {"naive", "unclipped", "clipped", "cispo", "sapo", "luspo", "vespo"} <= {m.value for m in SURROGATES}
    for other in ("dpo", "sft", "expert-iteration"):
        with pytest.raises(ValueError, match=f"loss '{other}' is a .* loss, not a surrogate of deltas"):
            parse_mode(other)
    with pytest.raises(ValueError, match="unknown loss mode 'ppo'; choose one of: naive, unclipped, clipped, .*dpo"):
        parse_mode("ppo")


def test_unknown_loss_mode_lists_the_choices():
    with pytest.raises(ValueError, match="unknown loss mode 'ppo'; choose one of: naive, unclipped, clipped"):
        compute_loss(torch.zeros(1, 1, 1), torch.zeros(1, 1), "ppo")
