"""Policies behind one interface: the lecture's factorised model and an autoregressive one with EOS.

    log_probs[..., b, t, q] = mask_q * log softmax(logits_q)[y_q]        (0 on padding after EOS)
    log pi(y | x)           = sum_q log_probs[..., q]
    entropy[..., b, t, q]   = mask_q * H(softmax(logits_q))              (the conditional at q given the prefix)

`POLICIES` is the one table from `PolicyKind` to the kind's functions (`PolicyOps`); the functions
below take any policy module (one policy or a run stack) and dispatch on its class. A third policy
is one new module with its own `OPS`, added to the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from lab.core.choices import parse_choice
from lab.policies import ar_model, autoregressive, factorized
from lab.policies.autoregressive import AutoregressivePolicy, AutoregressiveStack
from lab.policies.interface import PolicyKind, PolicyOps
from lab.policies.factorized import Policy, PolicyStack

POLICIES: dict[PolicyKind, PolicyOps] = {
    PolicyKind.factorized: factorized.OPS,
    PolicyKind.autoregressive: autoregressive.OPS,
}

__all__ = ["POLICIES", "AutoregressivePolicy", "AutoregressiveStack", "Policy", "PolicyKind", "PolicyOps",
           "PolicyStack", "greedy", "load_policy", "make_policy", "make_stack", "masked_log_probs", "ops_of",
           "parse_kind", "policy_from_state", "response_lengths", "response_mask", "sample", "sequence_log_probs",
           "token_entropy", "token_log_probs", "token_logits"]


def parse_kind(kind: PolicyKind | str) -> PolicyKind:
    return parse_choice(PolicyKind, kind, "policy")


def ops_of(policy: nn.Module) -> PolicyOps:
    """The interface functions of a policy module's kind."""
    for ops in POLICIES.values():
        if type(policy) in ops.classes:
            return ops
    raise TypeError(f"{type(policy).__name__} is not a registered policy class")


def make_policy(kind: PolicyKind | str, vocab_size: int, prompt_length: int, max_length: int, dim: int = 10,
                generator: torch.Generator | None = None, init_scale: float = 1.0) -> nn.Module:
    """One policy of the given kind (`max_length` is the response length of the factorised one)."""
    return POLICIES[parse_kind(kind)].single(vocab_size, prompt_length, max_length, dim, generator, init_scale)


def make_stack(kind: PolicyKind | str, vocab_size: int, prompt_length: int, max_length: int, dim: int,
               generators: list[torch.Generator], init_scales: list[float] | None = None,
               dtype: torch.dtype | None = None) -> nn.Module:
    """R policies of the given kind with a leading run axis, run r drawn from generators[r] (embedding
    scaled by init_scales[r], default 1: `TrainConfig.init_scale`), in `dtype` (default: torch's float32)."""
    return POLICIES[parse_kind(kind)].build(vocab_size, prompt_length, max_length, dim, generators, init_scales,
                                            dtype)


def _params(policy: nn.Module) -> dict[str, Tensor]:
    return dict(policy.named_parameters())


def token_logits(policy: nn.Module, prompts: Tensor, responses: Tensor) -> Tensor:
    """float[... batch trial pos tokens]: each position's logits given the prompt and the earlier tokens."""
    return ops_of(policy).token_logits(_params(policy), prompts, responses)


def response_mask(policy: nn.Module, responses: Tensor) -> Tensor:
    """bool[... pos]: the live tokens (every token of a fixed-length response)."""
    eos = ops_of(policy).eos(policy)
    if eos is None:
        return torch.ones_like(responses, dtype=torch.bool)
    return ar_model.response_mask(responses, eos)


def response_lengths(policy: nn.Module, responses: Tensor) -> Tensor:
    """|y|, the live tokens of each response (EOS included): int[... pos] -> int[...]."""
    return response_mask(policy, responses).sum(dim=-1)


def masked_log_probs(logits: Tensor, responses: Tensor, mask: Tensor) -> Tensor:
    """log softmax(logits)[y] on live tokens, exactly 0 on padding: float[... batch trial pos]."""
    log_softmax = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    picked = log_softmax.gather(-1, responses.expand(*log_softmax.shape[:-1]).unsqueeze(-1)).squeeze(-1)
    return torch.where(mask, picked, torch.zeros((), dtype=picked.dtype, device=picked.device))


def token_log_probs(policy: nn.Module, prompts: Tensor, responses: Tensor) -> Tensor:
    """Per-token log pi(y_q | x, y_<q) of given responses, 0 on padding: float[... batch trial pos]."""
    return masked_log_probs(token_logits(policy, prompts, responses), responses, response_mask(policy, responses))


def sequence_log_probs(policy: nn.Module, prompts: Tensor, responses: Tensor) -> Tensor:
    """log pi(y | x): float[... batch trial]."""
    return token_log_probs(policy, prompts, responses).sum(dim=-1)


def token_entropy(policy: nn.Module, prompts: Tensor, responses: Tensor) -> Tensor:
    """Entropy (nats) of each live position's next-token distribution given the response's prefix,
    0 on padding: float[... batch trial pos]."""
    log_softmax = torch.log_softmax(token_logits(policy, prompts, responses), dim=-1)
    entropy = -(log_softmax.exp() * log_softmax).sum(dim=-1)
    return torch.where(response_mask(policy, responses), entropy, torch.zeros((), dtype=entropy.dtype))


def sample(policy: nn.Module, prompts: Tensor, num_trials: int,
           generator: torch.Generator | Sequence[torch.Generator] | None = None) -> Tensor:
    """`num_trials` responses per prompt: int[... batch trial pos] (a list of generators: one per run)."""
    with torch.no_grad():
        return ops_of(policy).sample(_params(policy), prompts, num_trials, generator)


def greedy(policy: nn.Module, prompts: Tensor) -> Tensor:
    """The argmax response of every prompt: int[... batch pos]."""
    with torch.no_grad():
        return ops_of(policy).greedy(_params(policy), prompts)


def policy_from_state(state: dict[str, Tensor], run: int = 0) -> nn.Module:
    """Run `run` of a stacked state (name -> float[run ...], as in `Records.state`) as one policy of its kind."""
    kind = PolicyKind.autoregressive if "previous" in state else PolicyKind.factorized
    vocab_rows, dim = state["embedding"].shape[-2:]
    vocab_size = vocab_rows - 1 if kind is PolicyKind.autoregressive else vocab_rows  # E has an EOS row there
    policy = make_policy(kind, vocab_size, state["encode"].shape[-3], state["decode"].shape[-3], dim)
    return factorized.load_run(policy, state, run)


def load_policy(path) -> nn.Module:
    """Load a run's `policy.pt` (`lab.policies.factorized.save_policy`) as the policy of its kind."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    return policy_from_state({name: value.unsqueeze(0) for name, value in state.items()})
