"""Claim 26 (docs/claims.md): pi* = pi_ref exp(r / beta) / Z maximises J_beta(pi) = E_pi[r] - beta KL(pi || pi_ref);
J_beta(pi*) = beta log Z, and J_beta(pi*) - J_beta(pi) = beta KL(pi || pi*) for every pi.

Rafailov et al. 2023 (DPO), section 4 and appendix A.1; the course notes' PG -> PPO -> GRPO -> DPO chapter.
Exact: pi_ref is a lab policy (factorised, or autoregressive with its variable-length responses)
enumerated by `lab.exact.varlen`; the other policies are lab policies and random distributions over
the same responses; every J_beta and KL is a finite sum in float64.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.proofs.proof_tools import TOL, close

from lab.exact import optimum as O
from lab.exact import varlen
from lab.policies import make_policy

PROMPTS = torch.tensor([[0, 1], [1, 1]])


def tables(seed: int, kind: str, vocab: int, length: int):
    """pi_ref and a rival lab policy of one kind, a random distribution, and a reward table: float64[batch n]."""
    make = lambda s: make_policy(kind, vocab, 2, length, 3, torch.Generator().manual_seed(s)).double()  # noqa: E731
    ref_log_probs = varlen.all_log_probs(make(seed), PROMPTS).detach()
    policy_log_probs = varlen.all_log_probs(make(seed + 1), PROMPTS).detach()
    generator = torch.Generator().manual_seed(seed + 2)
    n = ref_log_probs.shape[-1]
    rewards = torch.randint(-1, 4, (len(PROMPTS), n), generator=generator).double()
    dirichlet = -torch.rand(len(PROMPTS), n, generator=generator, dtype=torch.float64).log()
    return ref_log_probs.exp(), [policy_log_probs.exp(), dirichlet / dirichlet.sum(-1, keepdim=True)], rewards


cases = dict(seed=st.integers(0, 2**31 - 1), kind=st.sampled_from(["factorized", "autoregressive"]),
             vocab=st.integers(2, 3), length=st.integers(1, 2), beta=st.sampled_from([0.05, 0.3, 1.0, 4.0]))


@given(**cases)
def test_claim_26_pi_star_maximises_j_beta_and_j_beta_of_pi_star_is_beta_log_z(seed, kind, vocab, length, beta):
    """J_beta(pi*) = beta log Z, and J_beta(pi*) >= J_beta(pi) for lab policies and random distributions,
    with pi* the best of all (Rafailov et al. 2023, eq. 4). Mutant: pi_ref exp(beta r) / Z (the temperature
    inverted) does not reach beta log Z wherever r is not constant."""
    ref, rivals, rewards = tables(seed, kind, vocab, length)
    star = O.kl_regularized_optimum(ref, rewards, beta)
    best = O.kl_regularized_objective(star, ref, rewards, beta)
    assert close(best, beta * O.log_partition(ref, rewards, beta))
    for rival in rivals + [ref]:
        assert bool((O.kl_regularized_objective(rival, ref, rewards, beta) <= best + TOL.atol).all())

    mutant = torch.softmax(ref.log() + beta * rewards, dim=-1)
    varies = rewards.amax(-1) > rewards.amin(-1)
    if beta != 1.0 and bool(varies.any()):  # at beta = 1 the mutant is pi* itself
        assert not close(O.kl_regularized_objective(mutant, ref, rewards, beta)[varies], best[varies])


@given(**cases)
def test_claim_26_the_gap_to_the_optimum_is_beta_times_the_kl_to_it(seed, kind, vocab, length, beta):
    """J_beta(pi*) - J_beta(pi) = beta KL(pi || pi*) exactly, for every pi (so the gap is 0 only at pi*).
    Mutant: the other direction, beta KL(pi* || pi), fails the identity."""
    ref, rivals, rewards = tables(seed, kind, vocab, length)
    star = O.kl_regularized_optimum(ref, rewards, beta)
    best = O.kl_regularized_objective(star, ref, rewards, beta)
    for rival in rivals:
        gap = best - O.kl_regularized_objective(rival, ref, rewards, beta)
        assert close(gap, beta * O.kl_divergence(rival, star))
        assert not close(gap, beta * O.kl_divergence(star, rival))


def test_claim_26_the_policy_functions_agree_with_the_tables_for_both_policies():
    """The same identity through `lab.exact.optimum`'s policy functions: objective_gap = beta kl_to_optimum,
    for the factorised and the autoregressive policy on the lecture's vocabulary."""
    prompts = torch.tensor([[1, 0, 2], [3, 2, 4]])
    for kind in ("factorized", "autoregressive"):
        reference = make_policy(kind, 5, 3, 3, 4, torch.Generator().manual_seed(0)).double()
        policy = make_policy(kind, 5, 3, 3, 4, torch.Generator().manual_seed(1)).double()
        gap = O.objective_gap(policy, reference, prompts, "distance", 0.2)
        assert close(gap, 0.2 * O.kl_to_optimum(policy, reference, prompts, "distance", 0.2))
        assert bool((gap > 0).all())
