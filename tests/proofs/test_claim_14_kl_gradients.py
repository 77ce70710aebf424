"""Claim 14 (docs/claims.md): as losses on current samples, k1, k2, k3 have different gradients.

"On samples from the current policy, no gradient through the sampling" is the expectation
sum_v pi_theta(v).detach() * grad k(v), which `lab.exact.expected_kl_estimate` gives with
`sample_log_probs=log_probs.detach()`; the KLs are exact sums (`lab.exact.exact_kl`).
"""

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tests.proofs.proof_tools import Tolerance, close, make_toy, toys

from lab.core.kl import penalized_rewards
from lab.exact.enumeration import all_responses, exact_kl, expected_kl_estimate, flat_grad, position_log_probs
from lab.exact.estimators import gradient_moments

TOL_DIFFERS = Tolerance(rtol=1e-4, atol=1e-6)
"""Two gradients this close are not told apart (the mutant needs a toy where they differ)."""


@given(toy=toys())
def test_claim_14_kl_estimators_as_losses_k1_has_no_gradient_k2_grad_kl_theta_ref_k3_grad_kl_ref_theta(toy):
    """Used as a loss on samples from the current policy, in expectation k1's gradient is zero,
    k2's is grad KL(pi_theta || pi_ref), and k3's is grad KL(pi_ref || pi_theta), the other
    direction (reference first: with pi_theta as the model, the forward, mass-covering KL),
    although k3's *value* is the unbiased estimate of KL(pi_theta || pi_ref).

    Claim 14 (docs/claims.md; derived and checked exactly here). Mutant: "k3's gradient is
    grad KL(pi_theta || pi_ref)" fails the same check (the two KL gradients differ on every drawn toy).
    """
    reference = make_toy(toy.generator.initial_seed() + 1, toy.vocab_size, toy.length,
                         toy.prompts.shape[1], dim=toy.policy.dim)
    log_probs = position_log_probs(toy.policy, toy.prompts)  # float[batch pos vocab], with gradient
    ref_log_probs = position_log_probs(reference.policy, toy.prompts).detach()
    samples = log_probs.detach()  # tokens drawn from the current policy, no gradient through drawing

    def loss_gradient(estimator):
        return flat_grad(expected_kl_estimate(estimator, log_probs, ref_log_probs, samples).sum(), toy.policy)

    grad_kl_theta_ref = flat_grad(exact_kl(log_probs, ref_log_probs).sum(), toy.policy)  # KL(pi_theta || pi_ref)
    grad_kl_ref_theta = flat_grad(exact_kl(ref_log_probs, log_probs).sum(), toy.policy)  # KL(pi_ref || pi_theta)
    assert close(loss_gradient("k1"), 0 * grad_kl_theta_ref)
    assert close(loss_gradient("k2"), grad_kl_theta_ref)
    assert close(loss_gradient("k3"), grad_kl_ref_theta)
    assert close(expected_kl_estimate("k3", log_probs, ref_log_probs, samples), exact_kl(log_probs, ref_log_probs))

    assert not close(loss_gradient("k3"), grad_kl_theta_ref)


def _penalty_directions(log_probs, ref_log_probs, policy):
    """The exact gradients each (estimator, placement) pair is claimed to add, times beta, to -grad J:
    float[params] each, from per-position log-prob tables (positions add up: they are independent)."""
    grad = lambda value: flat_grad(value.sum(), policy)  # noqa: E731
    forward, reverse = grad(exact_kl(log_probs, ref_log_probs)), grad(exact_kl(ref_log_probs, log_probs))
    k2_mean = grad(expected_kl_estimate("k2", log_probs, ref_log_probs))  # grad E_pi[k2], through the sampling too
    return {("k1", "loss"): 0 * forward, ("k2", "loss"): forward, ("k3", "loss"): reverse,
            ("k1", "reward"): forward, ("k2", "reward"): k2_mean - forward, ("k3", "reward"): forward - reverse}


def _response_tokens(table, responses):
    """Per-position log-probs float[batch pos vocab] at each response's tokens: float[batch n pos]."""
    index = responses.T.unsqueeze(0).expand(table.shape[0], -1, -1)  # int[batch pos n]
    return table.gather(-1, index).transpose(-1, -2)


@settings(deadline=None)
@given(toy=toys(), G=st.integers(2, 4), beta=st.sampled_from([0.1, 0.7]),
       mode=st.sampled_from(["raw", "loo", "centered"]))
def test_claim_14_where_the_penalty_goes_k2_in_the_loss_and_k1_in_the_reward_ascend_j_beta(toy, G, beta, mode):
    """The expected update of each (estimator, placement) pair, with raw, leave-one-out or centered deltas of a
    group of G:

        loss    (surrogate + beta * k):                    E[update] = s * grad J - beta * E[grad k]
        reward  (deltas of r - beta * sum_pos k, detached): E[update] = s * (grad J - beta * E[k grad log pi])

    with s = 1 for raw and leave-one-out deltas (claim 3) and (G-1)/G for centered ones (claim 4), and per pair the
    direction beta multiplies is: k1 in the loss 0; k2 in the loss grad KL(pi_theta || pi_ref); k3 in the loss
    grad KL(pi_ref || pi_theta); k1 in the reward grad KL(pi_theta || pi_ref); k2 in the reward
    grad E_pi[k2] - grad KL(pi_theta || pi_ref); k3 in the reward grad KL(pi_theta || pi_ref) - grad KL(pi_ref || pi_theta).
    So k1 in the reward follows s grad J_beta, J_beta = E[r] - beta KL(pi_theta || pi_ref), at beta for every mode
    (the group's scale is also on the penalty), and k2 in the loss s grad J_{beta / s}: J_beta itself for raw and
    leave-one-out deltas, J_{beta G / (G-1)} for centered ones; k3 in the loss follows
    s grad (J - (beta / s) KL(pi_ref || pi_theta)), the reverse direction.

    The reward placement is computed through `lab.core.kl.penalized_rewards`, the function the training loop
    calls, on every response's table; the loss placement through the estimators' exact expectation.
    Claim 14 (docs/claims.md; derived and checked exactly here; the placements are verl's `use_kl_loss` and
    `use_kl_in_reward`). Mutant: "k1 in the reward follows grad KL(pi_ref || pi_theta)", as k3 in the loss
    does, fails the same check.
    """
    reference = make_toy(toy.generator.initial_seed() + 1, toy.vocab_size, toy.length,
                         toy.prompts.shape[1], dim=toy.policy.dim)
    log_probs = position_log_probs(toy.policy, toy.prompts)  # float[batch pos vocab], with gradient
    ref_log_probs = position_log_probs(reference.policy, toy.prompts).detach()
    responses = all_responses(toy.vocab_size, toy.length)  # int[n pos]
    scale = (G - 1) / G if mode == "centered" else 1.0
    moments = lambda rewards: gradient_moments(toy.policy, toy.prompts, rewards, mode, G, method="values")  # noqa: E731
    grad_j = moments(toy.rewards).grad_j.sum(0)  # float[params]
    directions = _penalty_directions(log_probs, ref_log_probs, toy.policy)
    tokens, ref_tokens = _response_tokens(log_probs.detach(), responses), _response_tokens(ref_log_probs, responses)
    for estimator in ("k1", "k2", "k3"):
        in_loss = moments(toy.rewards).mean.sum(0) - beta * flat_grad(
            expected_kl_estimate(estimator, log_probs, ref_log_probs, log_probs.detach()).sum(), toy.policy)
        shaped = penalized_rewards(toy.rewards, tokens, ref_tokens, beta, estimator)  # float[batch n]
        in_reward = moments(shaped.detach()).mean.sum(0)
        assert close(in_loss, scale * grad_j - beta * directions[estimator, "loss"])
        assert close(in_reward, scale * (grad_j - beta * directions[estimator, "reward"]))

    grad_j_beta = grad_j - beta * flat_grad(exact_kl(log_probs, ref_log_probs).sum(), toy.policy)
    in_reward_k1 = moments(penalized_rewards(toy.rewards, tokens, ref_tokens, beta, "k1").detach()).mean.sum(0)
    assert close(in_reward_k1, scale * grad_j_beta)
    assume(not close(directions["k1", "reward"], directions["k3", "loss"], TOL_DIFFERS))
    assert not close(in_reward_k1, scale * (grad_j - beta * directions["k3", "loss"]))
