"""The lecture's factorised policy behind the policy interface (`lab.policies.interface`).

    h = sum_p E[x_p] @ A_p,    logits_q = (h @ B_q) @ E^T,    pi(y | x) = prod_q softmax(logits_q)[y_q]

The implementation is `lab.policy` (re-exported here unchanged: `Policy`, `PolicyStack`,
`policy_logits`, ...); this module only states it in the interface's terms. Logits do not
depend on the response, so the teacher-forced logits are the prompt's logits broadcast over
trials, and every response has the same length (no EOS, no mask).
"""

from __future__ import annotations

from torch import Tensor

from lab.policies.interface import PolicyKind, PolicyOps
from lab.policy import (Policy, PolicyStack, embed, init_parameters, load_policy, policy_from_state,
                        policy_logits, save_policy)
from lab.rollout import greedy_responses, sample_responses

__all__ = ["OPS", "Policy", "PolicyStack", "embed", "init_parameters", "load_policy", "policy_from_state",
           "policy_logits", "save_policy"]


def _logits(params: dict[str, Tensor], prompts: Tensor) -> Tensor:
    return policy_logits(params["embedding"], params["encode"], params["decode"], prompts)


def token_logits(params: dict[str, Tensor], prompts: Tensor, responses: Tensor) -> Tensor:
    """float[... batch trial pos vocab]: the same logits for every trial."""
    logits = _logits(params, prompts).unsqueeze(-3)  # float[... batch 1 pos vocab]
    return logits.expand(*logits.shape[:-4], logits.shape[-4], responses.shape[-2], *logits.shape[-2:])


OPS = PolicyOps(
    kind=PolicyKind.factorized,
    classes=(Policy, PolicyStack),
    token_logits=token_logits,
    sample=lambda params, prompts, num_trials, generator=None: sample_responses(
        _logits(params, prompts), num_trials, generator),
    greedy=lambda params, prompts: greedy_responses(_logits(params, prompts)),
    eos=lambda policy: None,
    build=PolicyStack,
    single=lambda vocab_size, prompt_length, max_length, dim, generator=None, init_scale=1.0: Policy(
        vocab_size, prompt_length, max_length, dim, generator, init_scale),
)
