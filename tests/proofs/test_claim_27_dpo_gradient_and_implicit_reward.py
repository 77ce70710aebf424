"""Claim 27 (docs/claims.md): the DPO gradient, and the implicit reward that lets Z cancel.

    grad -log sigmoid(beta h) = -beta sigmoid(-beta h) (grad log pi(y_w) - grad log pi(y_l))
    beta log pi*(y) / pi_ref(y) = r(y) - beta log Z          (a per-prompt constant)

so under Bradley-Terry sigmoid(beta h*) = sigmoid(r_w - r_l) for pi* and every pair: Z cancels.
Rafailov et al. 2023 (DPO), section 4 (eq. 5-7) and section 5.1 (the gradient); the course notes'
PG -> PPO -> GRPO -> DPO chapter. Exact: sequence log-probs of lab policies (masked sums for the
autoregressive one), autograd against the closed form; pi* from `lab.exact.optimum`.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.proofs.proof_tools import TOL, close

import lab.policies as P
from lab.core.dpo import dpo_loss
from lab.exact import optimum as O
from lab.exact import varlen
from lab.exact.enumeration import flat_grad

PROMPTS = torch.tensor([[0, 1], [1, 1], [1, 0]])

cases = dict(seed=st.integers(0, 2**31 - 1), kind=st.sampled_from(["factorized", "autoregressive"]),
             vocab=st.integers(2, 3), length=st.integers(1, 3), beta=st.sampled_from([0.05, 0.3, 1.0, 4.0]))


def policy_pair(seed, kind, vocab, length):
    make = lambda s: P.make_policy(kind, vocab, 2, length, 3, torch.Generator().manual_seed(s)).double()  # noqa: E731
    return make(seed), make(seed + 1)


@given(**cases)
def test_claim_27_the_dpo_gradient_is_minus_beta_sigmoid_of_minus_beta_h_times_the_score_difference(
        seed, kind, vocab, length, beta):
    """For one pair per prompt, drawn from the enumerated responses, autograd of the lab's `dpo_loss` on
    the policy's sequence log-probs equals -beta sigmoid(-beta h) (grad log pi(y_w) - grad log pi(y_l)).
    Mutants: the plain -beta (grad log pi(y_w) - grad log pi(y_l)) (no weight) and the weight
    sigmoid(+beta h) fail the same comparison."""
    policy, reference = policy_pair(seed, kind, vocab, length)
    responses = varlen.enumerate_responses(policy)
    generator = torch.Generator().manual_seed(seed)
    pick = lambda: responses[torch.randint(len(responses), (len(PROMPTS),), generator=generator)]  # noqa: E731
    chosen, rejected = pick().unsqueeze(1), pick().unsqueeze(1)  # int[batch 1 pos]
    logp = lambda model, y: P.sequence_log_probs(model, PROMPTS, y).squeeze(1)  # noqa: E731  float[batch]
    losses, _, _ = dpo_loss(logp(policy, chosen), logp(policy, rejected), logp(reference, chosen).detach(),
                            logp(reference, rejected).detach(), beta)
    autograd = flat_grad(losses.sum(), policy)

    h = ((logp(policy, chosen) - logp(reference, chosen)) - (logp(policy, rejected) - logp(reference, rejected))).detach()
    scores = torch.stack([flat_grad(logp(policy, chosen)[b] - logp(policy, rejected)[b], policy)
                          for b in range(len(PROMPTS))])  # float[batch params]
    closed_form = (-beta * torch.sigmoid(-beta * h)).unsqueeze(-1) * scores
    assert close(autograd, closed_form.sum(0))

    moves = scores.norm(dim=-1) > TOL.differs  # a pair whose two responses differ
    if bool(moves.any()):
        actual = flat_grad(losses[moves].sum(), policy)
        weight = lambda w: (w.unsqueeze(-1) * scores)[moves].sum(0)  # noqa: E731
        # the unweighted mutant is off by a factor sigmoid(beta h), the flipped one wherever h != 0:
        # at least one of the two regimes holds for every pair
        if bool((torch.sigmoid(beta * h)[moves] > 1e-6).any()):
            assert not close(actual, weight(-beta * torch.ones_like(h)))
        if bool((h[moves].abs() > TOL.differs).any()):
            assert not close(actual, weight(-beta * torch.sigmoid(beta * h)))


@given(**cases)
def test_claim_27_the_implicit_reward_of_pi_star_is_r_up_to_a_per_prompt_constant(seed, kind, vocab, length, beta):
    """beta log pi*/pi_ref = r - beta log Z for every response, so for every pair beta h* = r_w - r_l and the
    Bradley-Terry probability sigmoid(r_w - r_l) is sigmoid(beta h*): Z cancels. Mutant: "beta log pi*/pi_ref
    equals r" (no constant) fails wherever log Z != 0."""
    reference, _ = policy_pair(seed, kind, vocab, length)
    ref_log_probs = varlen.all_log_probs(reference, PROMPTS).detach()
    rewards = torch.randint(0, 4, ref_log_probs.shape, generator=torch.Generator().manual_seed(seed)).double()
    implicit = beta * (O.log_optimum(ref_log_probs, rewards, beta) - ref_log_probs)  # float[batch n]
    log_z = O.log_partition(ref_log_probs.exp(), rewards, beta)
    assert close(implicit, rewards - beta * log_z.unsqueeze(-1))
    pair_h = implicit.unsqueeze(-1) - implicit.unsqueeze(-2)  # beta h* for every (winner, loser)
    assert close(torch.sigmoid(pair_h), torch.sigmoid(rewards.unsqueeze(-1) - rewards.unsqueeze(-2)))

    nonzero = log_z.abs() > TOL.differs
    if bool(nonzero.any()):
        assert not close(implicit[nonzero], rewards[nonzero])
