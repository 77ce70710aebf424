"""A reward model as a task's reward: the proxy r_phi that trains a run, beside the gold reward R it was fitted to.

    reward(x, y)  = r_phi(x, y)                          (`RewardMLP`, float64 inside, float32 out as every reward)
    optimum(x)    = max over every response y of r_phi(x, y)     (the proxy's best need not be sorted(x))
    gold(x, y)    = R(x, y)                              (the true reward its preference labels came from)

`--reward learned:PATH` trains against `reward`; the loop records E[R] and E[r_phi] exactly each epoch
(`lab.training.optimum.ProxyTracker`), so what Gao, Schulman and Hilton (2023) could only estimate with a
held-out gold model is a sum over every response here.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lab.training.reward_model import RewardMLP


class LearnedReward:
    """A vectorized reward (`tasks.RewardFn`): (prompts int[batch pos], responses int[... batch trial pos]) ->
    float32[... batch trial], with the proxy's own `optimum` and the `gold` reward function beside it."""

    def __init__(self, model: RewardMLP, responses: Tensor, gold, gold_name: str) -> None:
        """`responses` int[n pos]: every response of the space the model was fitted on (for `optimum`)."""
        self.model, self.responses, self.gold, self.gold_name = model, responses, gold, gold_name

    def __call__(self, prompts: Tensor, responses: Tensor) -> Tensor:
        with torch.no_grad():
            return self.model(prompts.unsqueeze(-2), responses).float()  # int[batch 1 pos] against [... batch trial]

    def optimum(self, prompts: Tensor) -> Tensor:
        """The proxy's best score per prompt, float32[batch]."""
        responses = self.responses.to(prompts.device).expand(prompts.shape[0], *self.responses.shape)
        return self(prompts, responses).amax(-1)

    def to(self, device: torch.device) -> LearnedReward:
        return LearnedReward(self.model.to(device), self.responses.to(device), self.gold, self.gold_name)
