"""Exact analysis by enumeration: the toy's response spaces are small, so expectations are sums.

    lab.exact.enumeration     the factorised policy: all V^L responses, J, grad J, scores, KL   (the names below)
    lab.exact.voting          pass@k and maj@k, exactly from the response table
    lab.exact.estimators      moments of the policy-gradient estimator for each delta mode
    lab.exact.varlen          any policy, variable-length responses included
    lab.exact.prefix_tree     the autoregressive policy's prefix recursion (KL, exploration)
    lab.exact.distributions   a policy's distribution over all responses: expectations and KLs, either policy
    lab.exact.optimum         the KL-regularised optimum pi*, J_beta, a local ascent of it in a policy class
    lab.exact.reverse_kl      the optimum of E[r] - beta KL(pi_ref || pi), where GRPO with k3 in the loss goes
    lab.exact.flow            the exact expected-update flow of a population loss, to a stated tolerance
    lab.exact.expected_update each DPO section method's exact expected update, in natural coordinates
    lab.exact.update_flow     where that update's flow goes from pi_ref, converged or still moving, to stated tolerances
    lab.exact.online_pairs    the exact distribution of the lab's online DPO pair (a group's best against its worst)
    lab.exact.pairs           the population DPO loss over every pair of responses
    lab.exact.values          V^pi and Q^pi at every state, the exact expected GAE advantage of any critic
    lab.exact.critic_error    a critic's exact error against V^pi, the exact expected gradient under GAE
    lab.exact.critic_moments  the exact mean and variance of the GAE and group estimators, either policy

This package's own namespace re-exports the enumeration functions and pass@k / maj@k for users
(`lab.exact.pass_at_k`); the lab's modules import from the module that defines a name.
"""

from lab.exact.enumeration import (  # noqa: F401
    ExactLimits,
    LIMITS,
    Reward,
    all_log_probs,
    all_probs,
    all_responses,
    check_space,
    exact_kl,
    expected_kl_estimate,
    expected_reward,
    flat_grad,
    parameter_vector,
    position_log_probs,
    response_index,
    reward_table,
    score_matrix,
    sequence_kl,
)
from lab.exact.voting import maj_at_k, pass_at_k  # noqa: F401
