"""Where each method goes: the exact expected-update flow (lab.exact.update_flow) against the closed forms.

The flow integrates each method's exact expected update (lab.exact.expected_update) in the tabular class from
pi_ref; where the method has a closed-form end (pi* of J_beta, pi' of the reverse-KL objective with the group
scale and the token mean's 1/C, IPO's minimiser by Newton's method) the flow's end is it, to 1e-10 in KL. The
online pair's exact distribution is checked against the lab's own pairing code on every group of a small toy.
"""

import dataclasses
import itertools

import pytest
import torch

from lab.core.aggregation import kl_term
from lab.core.losses import compute_loss
from lab.exact import optimum as O
from lab.exact.expected_update import Method, Problem
from lab.exact.online_pairs import extreme_pair_weights
from lab.exact.update_flow import CONVERGED, RISING, UpdateFlowConfig, follow
from lab.experiments.dpo_exact import METHODS, closed_forms, loss_beta, reference_tables, top_set_limit
from lab.training.config import TrainConfig
from lab.training.preference_pairs import online_pairs
from lab.training.runs import RunGroups
from tasks.sorting import make_task

TASK = make_task()
BETA, G = 0.05, 10
C = TASK.prompts.shape[1]  # the factorised policy's response length


@pytest.fixture(scope="module")
def lecture():
    """Seed 0's reference on the lecture's prompts, the section's beta and G: (problem, closed forms)."""
    ref_log_probs, rewards = reference_tables([TrainConfig(seed=0)], TASK.prompts)
    return (Problem(ref_log_probs, rewards, BETA, G, C), closed_forms(ref_log_probs, rewards, BETA, G, C))


def test_the_online_pair_distribution_is_the_labs_online_pairs_over_every_group():
    """P(y_hi = a, y_lo = b) = pi(a) pi(b) k(r_a, r_b) (lab.exact.online_pairs) is, pair by pair, the probability
    that lab.training.preference_pairs.online_pairs (the training loop's: first highest against first lowest reward,
    none for a constant group) pairs a over b, summed over all 5^3 groups of G = 3 draws with tied rewards."""
    probs = torch.softmax(torch.tensor([0.3, -1.0, 0.5, 1.2, -0.4], dtype=torch.float64), -1)
    rewards = torch.tensor([1.0, 2.0, 2.0, 3.0, 1.0], dtype=torch.float64)
    groups = torch.tensor(list(itertools.product(range(5), repeat=3)))  # int[125 3]
    pairs = online_pairs(groups[None, :, :, None], rewards[groups][None].float(),
                         RunGroups(["argmax"], torch.device("cpu")), [torch.Generator()])
    enumerated = torch.zeros(5, 5, dtype=torch.float64)
    for group, (hi, lo), kept in zip(groups, pairs.index[0], pairs.keep[0, :, 0]):
        if kept:
            enumerated[group[hi], group[lo]] += probs[group].prod()
    exact = probs[:, None] * probs[None, :] * extreme_pair_weights(probs, rewards, 3)
    torch.testing.assert_close(exact, enumerated, rtol=0, atol=1e-15)


def test_the_labs_grpo_loss_weighs_a_sequences_kl_c_times_its_policy_gradient_term():
    """Per sequence, the gradient of the token-mean surrogate is (1/C) delta grad log pi(y) while the KL term sums its
    C positions (lab.core.aggregation.kl_term): the expected update is (s / C) grad J - beta grad KL, the scale the
    flow and the closed forms take (beta' = beta C G / (G-1))."""
    log_probs = torch.log(torch.tensor([[[[0.2, 0.5, 0.4]]]])).requires_grad_(True)  # float[run batch trial pos]
    surrogate = torch.autograd.grad(compute_loss(log_probs, torch.ones(1, 1, 1), "naive").sum(), log_probs)[0]
    penalty = torch.autograd.grad(kl_term(log_probs - log_probs.detach().exp()).sum(), log_probs)[0]
    torch.testing.assert_close(penalty, -surrogate * log_probs.shape[-1])


@pytest.mark.parametrize("label", ["GRPO, k3 in the loss", "GRPO, k2 in the loss", "GRPO, k1 in the reward",
                                   "online DPO, Bradley-Terry", "offline DPO, Bradley-Terry", "offline IPO, argmax"])
def test_each_flow_ends_at_its_closed_form(lecture, label):
    """The flow converges on every prompt of seed 0's reference and ends at the method's closed form, to 1e-10 in
    KL: GRPO with centered deltas, k3 in the loss at pi' of E[r] - beta' KL(pi_ref || pi), k2 in the loss at pi*
    of beta', beta' = beta C G / (G-1), run at beta = BETA (G-1) / (G C) so that beta' = BETA; k1 in the reward at
    pi* of beta; DPO under Bradley-Terry preferences, offline
    and online, at pi* (claim 28); offline IPO at its minimiser (Newton). Claims 4, 14, 26, 28 (docs/claims.md).
    Mutants: dropping the group scale from the GRPO update, or k3's direction turned into KL(pi || pi_ref), fail; so
    does pi' from a bisection on lambda itself (lab.exact.reverse_kl before it bisected lambda - max r): seed 0's
    second prompt has pi_ref(y*) = e^-34, lambda - max r about 1e-16 beside max r = 5, and it misses by 0.09 nats."""
    problem, closed = lecture
    if "in the loss" in label:  # the section's matching: a KL in the loss at beta = beta' (G-1) / (G C)
        problem = dataclasses.replace(problem, beta=loss_beta(BETA, G, C))
    end = follow(METHODS[label], problem)
    assert set(end.outcome()) == {CONVERGED}
    assert float(O.kl_divergence(end.log_probs.exp(), closed[label][1]).abs().max()) < 1e-10


def _toy(rewards: list[float]) -> Problem:
    ref = torch.log_softmax(torch.tensor([[2.0, 1.0, 0.0, -1.5, -2.5]], dtype=torch.float64), -1)
    return Problem(ref, torch.tensor([rewards], dtype=torch.float64), 0.5, 4, 3)


@pytest.mark.parametrize("pairs", ["offline", "online"])
def test_the_argmax_flow_never_converges_and_its_kl_rises_to_minus_log_pi_ref_of_the_top_set(pairs):
    """DPO under argmax preferences (claim 28: no finite minimiser): its flow never converges, its KL to pi_ref rises
    with flow time and approaches -log pi_ref(top set), past any bound below it. With tied best responses the
    natural flow pushes every best response's log-ratio alike, so it ends at pi_ref restricted to the top set, whose
    KL is exactly -log pi_ref(top set); the plain gradient flow on logits ends at pi_ref^(1 + 1/beta) there instead
    (claim 28's tie case, tests/proofs), whose KL exceeds it: where a method has no fixed point, the split among
    tied best responses depends on the parametrisation. The flow at flow times 10, 10^3, 10^5, 10^8. Mutant: "the
    natural flow ends at pi_ref^(1 + 1/beta) on the top set" fails."""
    for rewards in ([0.0, 1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 2.0, 4.0, 4.0]):
        problem = _toy(rewards)
        ends = [follow(Method(pairs=pairs), problem, UpdateFlowConfig(max_time=t)) for t in (1e1, 1e3, 1e5, 1e8)]
        kl = [float(O.kl_divergence(e.log_probs.exp(), problem.ref_log_probs.exp())) for e in ends]
        top = problem.rewards == problem.rewards.max()
        bound = -float(problem.ref_log_probs[top].logsumexp(-1))
        assert all(not bool(e.converged.any()) for e in ends) and ends[1].outcome() == [RISING]
        assert kl == sorted(kl) and kl[0] < kl[-1] and bound - 1e-6 < kl[-1] <= bound + 1e-12
        on_top = torch.where(top, problem.ref_log_probs, -torch.inf).softmax(-1)  # pi_ref restricted to the top set
        assert float(O.kl_divergence(on_top, ends[-1].log_probs.exp())) < 1e-6
        plain_limit = top_set_limit(problem.ref_log_probs, problem.rewards, problem.beta)
        assert (float(O.kl_divergence(plain_limit, ends[-1].log_probs.exp())) < 1e-6) == (int(top.sum()) == 1)
