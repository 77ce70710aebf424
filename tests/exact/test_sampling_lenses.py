"""Issue 38's exact lenses against their definitions: dynamic sampling's cost and kept batch
(lab.exact.dynamic_sampling, by enumerating every sequence of draws), the sampler's expected update with each
correction (lab.exact.sampler_bias, against autograd of the lab's own gated loss summed over every response), and
the reference schemes' fixed points (lab.exact.reference_flow, against lab.exact.optimum)."""

import itertools
import math

import pytest
import torch

from lab.core.deltas import compute_deltas
from lab.core.importance import importance_weights, off_policy_mask
from lab.core.losses import compute_loss
from lab.exact.dynamic_sampling import (expected_draws, flat_kept_probability, kept_value_probs,
                                        no_signal_probability, value_probs)
from lab.exact.optimum import log_optimum
from lab.exact.reference_flow import follow_reference
from lab.exact.sampler_bias import relative_bias, response_tables, sampler_update

F64 = dict(dtype=torch.float64)


def kept_distribution_by_enumeration(probs, rewards, group_size, cap):
    """P(kept group = g) by its definition: every sequence of up to `cap` groups, the first with signal kept, the
    cap-th kept whatever it is."""
    groups = list(itertools.product(range(len(probs)), repeat=group_size))
    p = {g: math.prod(probs[i] for i in g) for g in groups}
    signal = {g: len({rewards[i] for i in g}) > 1 for g in groups}
    kept, cost = {g: 0.0 for g in groups}, 0.0
    for draws in range(1, cap + 1):
        for sequence in itertools.product(groups, repeat=draws):
            if any(signal[g] for g in sequence[:-1]) or (draws < cap and not signal[sequence[-1]]):
                continue  # not a way the sampler stops at this draw
            weight = math.prod(p[g] for g in sequence)
            kept[sequence[-1]] += weight
            cost += draws * weight
    return kept, cost


def test_dynamic_sampling_cost_and_kept_batch_match_the_enumerated_draws():
    """Three responses with rewards 0, 0, 1 (probabilities 0.5, 0.3, 0.2), G = 2, cap N = 3: the closed forms give
    the expected number of draws, the chance the kept group is flat, and the kept response's reward law that the
    enumeration of every draw sequence gives, to 1e-12. Mutants tried: S_N with N + 1 terms; the flat group kept
    with probability q^N instead of q^(N-1) per group."""
    probs, rewards, G, cap = [0.5, 0.3, 0.2], [0.0, 0.0, 1.0], 2, 3
    kept, cost = kept_distribution_by_enumeration(probs, rewards, G, cap)
    values, p_v = value_probs(torch.tensor(probs, **F64), torch.tensor(rewards, **F64))
    q = no_signal_probability(p_v, G)
    assert abs(q.item() - (0.8 ** 2 + 0.2 ** 2)) < 1e-15
    assert abs(expected_draws(q, cap).item() - cost) < 1e-12
    flat = sum(w for g, w in kept.items() if len({rewards[i] for i in g}) == 1)
    assert abs(flat_kept_probability(q, cap).item() - flat) < 1e-12
    one = [sum(w * sum(rewards[i] == v for i in g) / G for g, w in kept.items()) for v in values.tolist()]
    torch.testing.assert_close(kept_value_probs(p_v, G, cap), torch.tensor(one, **F64), rtol=0, atol=1e-12)
    assert abs(expected_draws(torch.tensor(1.0, **F64), 4).item() - 4) < 1e-15  # never any signal: the cap


def test_dynamic_sampling_multiplies_the_expected_update_by_its_cost():
    """Claim: the kept group's expected centered-delta update is S_N times the plain one (flat groups give zero
    deltas). By enumeration over groups of G = 2 from four responses, the update in logits sum_g P(g) sum_i d_i
    (e_{y_i} - pi), plain and kept. Mutant tried: normalized deltas with std_eps = 0 (NaN on flat groups)."""
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1], **F64)
    rewards = torch.tensor([1.0, 0.0, 0.0, 2.0], **F64)
    G, cap = 2, 3
    kept, _ = kept_distribution_by_enumeration(probs.tolist(), rewards.tolist(), G, cap)

    def update(weights):
        total = torch.zeros(4, **F64)
        for g, w in weights.items():
            d = compute_deltas(rewards[list(g)], "centered")
            for i, y in enumerate(g):
                total += w * d[i] * (torch.nn.functional.one_hot(torch.tensor(y), 4).double() - probs)
        return total

    plain = update({g: math.prod(probs[i].item() for i in g) for g in kept})
    q = no_signal_probability(value_probs(probs, rewards)[1], G)
    torch.testing.assert_close(update(kept), expected_draws(q, cap) * plain, rtol=1e-12, atol=1e-14)


def tables(seed, batch=2, length=2, vocab=3, shift=0.6):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, length, vocab, generator=g, **F64)
    stale = logits + shift * torch.randn(batch, length, vocab, generator=g, **F64)
    rewards = torch.randint(0, 3, (batch, vocab ** length), generator=g).double()
    return torch.log_softmax(logits, -1), torch.log_softmax(stale, -1), rewards


@pytest.mark.parametrize("correction, bounds, threshold", [
    (None, (None, None), None), ("token-truncate", (0.5, 2.0), None), ("token-mask", (None, 1.5), None),
    ("sequence-truncate", (None, 3.0), 0.05), ("sequence-mask", (0.2, 5.0), None)])
def test_sampler_update_is_the_gradient_of_the_gated_loss_summed_over_every_response(correction, bounds,
                                                                                    threshold):
    """u_mu = -d/dz sum_y mu(y) loss(y), with loss(y) the lab's naive surrogate on response y gated by its
    importance weights and off-policy mask (lab.core.losses.compute_loss with `gate`), token mean: the training
    step's own path, in float64. Mutant tried: the mask's KL with the sign flipped."""
    log_pi, log_mu, rewards = tables(0)
    responses, token_mu = response_tables(log_mu)
    mu = token_mu.sum(-1).exp()
    logits = log_pi.clone().requires_grad_(True)
    token_pi = response_tables(torch.log_softmax(logits, -1))[1]  # float[batch n pos]
    gate = torch.ones_like(token_pi)
    if correction is not None:
        gate = gate * importance_weights(token_pi, token_mu, correction, *bounds)
    if threshold is not None:
        gate = gate * off_policy_mask(rewards, token_pi, token_mu, threshold)
    losses = torch.stack([compute_loss(token_pi[:, i:i + 1].unsqueeze(1), rewards[:, i:i + 1].unsqueeze(1), "naive",
                                       gate=gate[:, i:i + 1].unsqueeze(1)) for i in range(len(responses))], -1)
    (-(mu * losses).sum()).backward()
    ours = sampler_update(log_pi, log_mu, rewards, correction, *bounds, mask_threshold=threshold)
    torch.testing.assert_close(ours.mean, logits.grad, rtol=1e-10, atol=1e-12)


def test_sequence_weights_without_bounds_remove_the_bias_exactly_and_the_others_do_not():
    """pi / mu per response, unbounded, makes E_mu[w g] = E_pi[g]: bias 0 to 1e-12; uncorrected, per-token and
    truncated weights leave a bias (> 1e-3 here). The variance of one response's update is >= 0 in every mode."""
    log_pi, log_mu, rewards = tables(1)
    on_policy = sampler_update(log_pi, log_pi, rewards).mean
    exact = sampler_update(log_pi, log_mu, rewards, "sequence-truncate", None, math.inf).mean
    assert relative_bias(exact, on_policy).max() < 1e-12
    for correction, bounds in ((None, (None, None)), ("token-truncate", (None, math.inf)),
                               ("sequence-truncate", (None, 1.0))):
        result = sampler_update(log_pi, log_mu, rewards, correction, *bounds)
        assert relative_bias(result.mean, on_policy).min() > 1e-3
        assert (result.variance >= 0).all()


def test_a_frozen_reference_stops_at_the_kl_optimum_and_a_synced_one_at_the_reward_maximiser():
    """k2 in the loss, frozen reference: the iteration's end is pi* = pi_0 exp(a r / beta) / Z (claim 26) to 1e-6;
    synced (alpha 0.5, every 5 steps) it ends with E[r] within 1e-3 of max r, further than the frozen one. Mutant
    tried: mixing toward the initial policy instead of the current one."""
    g = torch.Generator().manual_seed(2)
    initial = torch.log_softmax(torch.randn(1, 6, generator=g, **F64), -1)
    rewards = torch.tensor([[0.0, 1.0, 0.5, 0.2, 0.0, 0.9]], **F64)
    frozen = follow_reference(initial, rewards, 0.5, 800, 4.0, estimator="k2")
    torch.testing.assert_close(frozen.log_probs, log_optimum(initial, rewards, 0.5), rtol=0, atol=1e-6)
    synced = follow_reference(initial, rewards, 0.5, 1500, 4.0, alpha=0.5, every=5, estimator="k2")
    assert synced.expected_reward[-1].item() > 1.0 - 1e-3 > frozen.expected_reward[-1].item() + 0.05
