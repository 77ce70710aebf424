"""What every policy provides: the small interface that sampling, log-probs, the exact oracle and
the training loop use.

    logits[..., b, t, q, :]  = the policy's logits at response position q of trial t,
                               given prompt b and the trial's own tokens before q
    log pi(y | x)            = sum_q mask_q log softmax(logits_q)[y_q]
    mask_q                   = 1 while the response is live (all ones without an EOS token)

A policy kind is one `PolicyOps` record of pure functions of a parameter dict (name -> tensor,
optionally with a leading `run` axis), so `torch.func` can differentiate through them and a
third policy is one new module that defines its own `OPS` (registered in `lab.policies.POLICIES`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from lab.core.modes import PolicyKind


@dataclass(frozen=True)
class PolicyOps:
    """The functions one policy kind implements; `params` is `dict(module.named_parameters())`."""

    kind: PolicyKind
    classes: tuple[type, ...]
    """the nn.Module classes of this kind (one policy, a run stack)"""
    token_logits: Callable[[dict[str, Tensor], Tensor, Tensor], Tensor]
    """(params, prompts int[... batch pos], responses int[... batch trial pos]) -> float[... batch trial pos tokens]"""
    sample: Callable[..., Tensor]
    """(params, prompts, num_trials, generator or list of generators) -> int[... batch trial pos]"""
    greedy: Callable[[dict[str, Tensor], Tensor], Tensor]
    """(params, prompts) -> the argmax response int[... batch pos]"""
    eos: Callable[[object], int | None]
    """module -> the EOS token id, or None for fixed-length responses"""
    build: Callable[..., object]
    """(vocab_size, prompt_length, max_length, dim, generators, init_scales or None) -> a run stack"""
    single: Callable[..., object]
    """(vocab_size, prompt_length, max_length, dim, generator, init_scale) -> one policy"""
