"""Sampling at temperature T: each run's policy seen with its logits divided by T, by scaling the embedding.

    logits(E / sqrt(T)) = logits(E) / T        both policies' logits are quadratic in E (the hidden state's source
                                               and the tied output layer), so one scale inside the fused nodes
                                               divides every logit by T, with the gradient taken through it

`temperature_scale` is 1 / sqrt(T) per run (None at T = 1 everywhere: the plain path, bit for bit), `tempered` the
parameters at it, `tempered_module` and `TemperedView` a stack at it for the exact code of lab.exact, `TemperedStack`
what both kinds of `lab.training.kinds` share. Moved here from lab.training.kinds (which re-exports them) to keep
that module under 300 lines.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lab.training.config import TrainConfig


def temperature_scale(configs: list[TrainConfig], device: torch.device) -> Tensor | None:
    """1 / sqrt(T) per run, float[run]; None when every run has T = 1, so that such runs take exactly the
    code path they took before temperatures existed (bit for bit).

    Sampling at temperature T draws from softmax(logits / T), and the loss's log-probs (and the
    reference's, and the entropy) are taken at the same T, as verl's rollout and actor do. Both
    policies' logits are quadratic in the embedding E (it gives the hidden state and is the tied output
    layer), so logits(E / sqrt(T)) = logits(E) / T: scaling the embedding inside the fused nodes divides
    every logit by T, with the gradient taken through the scaling (tests/training/test_temperature.py)."""
    temperatures = [c.temperature for c in configs]
    if all(t == 1.0 for t in temperatures):
        return None
    return torch.tensor(temperatures, dtype=torch.float64, device=device).rsqrt()


def tempered(parameters: list[Tensor], scale: Tensor | None) -> list[Tensor]:
    """The parameters (embedding first, each with a leading run axis) seen at each run's temperature."""
    if scale is None:
        return parameters
    return [parameters[0] * scale.to(parameters[0].dtype).view(-1, *[1] * (parameters[0].dim() - 1)),
            *parameters[1:]]


def tempered_module(policy, scale: Tensor | None):
    """A policy stack at each run's temperature as a module of its own (a copy whose embedding is scaled by
    1 / sqrt(T)), for code that takes a policy module, such as the exact analyses of lab.exact; the stack
    itself when every T is 1."""
    if scale is None:
        return policy
    import copy

    view = copy.deepcopy(policy)
    embedding = dict(view.named_parameters())["embedding"]
    with torch.no_grad():
        embedding.mul_(scale.to(embedding.dtype).view(-1, *[1] * (embedding.dim() - 1)))
    return view


class TemperedView:
    """A policy stack's parameters at temperature, where exact code reads `embedding` and `named_parameters()`."""

    def __init__(self, policy, scale: Tensor) -> None:
        names, values = zip(*policy.named_parameters())
        self.params = dict(zip(names, tempered(list(values), scale)))
        self.embedding = self.params["embedding"]

    def named_parameters(self):
        return self.params.items()


class TemperedStack:
    """What both kinds share: their policy stack (`self.policy`) at each run's temperature (`self.scale`)."""

    def tempered_policy(self):
        """The kind's stack at each run's temperature, as a module of its own (`tempered_module`)."""
        return tempered_module(self.policy, self.scale)
