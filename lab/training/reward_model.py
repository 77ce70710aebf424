"""Train a reward model on preference pairs drawn from a policy, and measure it exactly.

Data. For each prompt x, 2N responses drawn from the drawing policy pi (exactly, from its enumerated
distribution, with the config's generator), paired (y_i, y_N+i) and labelled by the true reward R:

    bradley-terry   y_i preferred with probability sigmoid((R_i - R_N+i) / T)
    argmax          the higher reward preferred (a tie: a fair coin), the label flipped with probability `label_noise`

Model. `RewardMLP`: one-hot prompt and response tokens -> `width` tanh units -> one score r_phi(x, y);
the sizes of the family differ only in `width`. Loss: TRL's RewardTrainer loss (`lab.core.reward_model`),
full-batch Adam for `steps` steps.

Exact measures over every pair of enumerated responses, weighted by pi(a) pi(b) (pairs of equal true
reward left out), and over every response under pi, averaged over prompts:

    preference_accuracy   P(sign(r_phi(a) - r_phi(b)) = sign(R(a) - R(b)))
    reward_correlation    the pi-weighted Pearson correlation of r_phi(x, .) with R(x, .)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from lab.core.reward_model import reward_model_loss, reward_model_metrics
from lab.exact import varlen

SIZES = {"small": 4, "medium": 16, "large": 64}
"""The family's widths (tanh units)."""


@dataclass(frozen=True)
class RewardModelConfig:
    """How the preference data is drawn and the model trained."""

    size: str = "medium"
    """one of SIZES"""
    pairs_per_prompt: int = 64
    """N: 2N responses per prompt from the drawing policy"""
    preference: str = "bradley-terry"
    """bradley-terry or argmax"""
    temperature: float = 1.0
    """Bradley-Terry's T: P(a preferred) = sigmoid((R_a - R_b) / T)"""
    label_noise: float = 0.0
    """argmax: probability that a label is flipped"""
    steps: int = 500
    lr: float = 0.01
    margin: float | None = None
    """TRL's margin, the same for every pair (None: no margin)"""
    center_rewards_coefficient: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise ValueError(f"reward model size must be one of {', '.join(SIZES)}, got {self.size!r}")
        if self.preference not in ("bradley-terry", "argmax"):
            raise ValueError(f"preference must be bradley-terry or argmax, got {self.preference!r}")
        if not 0.0 <= self.label_noise <= 0.5:
            raise ValueError(f"label_noise must be in [0, 0.5], got {self.label_noise}")


class RewardMLP(nn.Module):
    """r_phi(x, y) from one-hot tokens: prompt int[... pos_x] (values < V), response int[... pos] (values <= V, EOS = V)."""

    def __init__(self, vocab_size: int, prompt_length: int, response_length: int, width: int,
                 generator: torch.Generator) -> None:
        super().__init__()
        self.vocab_size, self.prompt_length, self.response_length = vocab_size, prompt_length, response_length
        features = prompt_length * vocab_size + response_length * (vocab_size + 1)
        self.hidden = nn.Parameter(torch.randn(features, width, generator=generator) / features ** 0.5)
        self.bias = nn.Parameter(torch.zeros(width))
        self.out = nn.Parameter(torch.randn(width, generator=generator) / width ** 0.5)

    def features(self, prompts: Tensor, responses: Tensor) -> Tensor:
        x = nn.functional.one_hot(prompts, self.vocab_size).flatten(-2)
        y = nn.functional.one_hot(responses, self.vocab_size + 1).flatten(-2)
        # numpy's, not torch.broadcast_shapes: that one imports torch's symbolic-shape machinery (sympy, ~0.6 s)
        shape = np.broadcast_shapes(tuple(x.shape[:-1]), tuple(y.shape[:-1]))
        return torch.cat([x.expand(*shape, x.shape[-1]), y.expand(*shape, y.shape[-1])], dim=-1).to(self.hidden)

    def forward(self, prompts: Tensor, responses: Tensor) -> Tensor:
        """Scores float[...] for prompts int[... pos_x] broadcast against responses int[... pos]."""
        return torch.tanh(self.features(prompts, responses) @ self.hidden + self.bias) @ self.out

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


def draw_pairs(probs: Tensor, rewards: Tensor, config: RewardModelConfig, generator: torch.Generator):
    """Indices (chosen, rejected) int[batch N] into the enumerated responses, labelled as the config says."""
    n = config.pairs_per_prompt
    drawn = torch.multinomial(probs, 2 * n, replacement=True, generator=generator)
    first, second = drawn[:, :n], drawn[:, n:]
    gap = rewards.gather(1, first) - rewards.gather(1, second)
    uniform = torch.rand(gap.shape, generator=generator, dtype=torch.float64)
    if config.preference == "bradley-terry":
        first_wins = uniform < torch.sigmoid(gap / config.temperature)
    else:
        coin = torch.rand(gap.shape, generator=generator, dtype=torch.float64) < 0.5
        first_wins = torch.where(gap == 0, coin, gap > 0) ^ (uniform < config.label_noise)
    return torch.where(first_wins, first, second), torch.where(first_wins, second, first)


PAIR_ROWS = 512
"""`exact_measures` takes the pairs (a, b) this many a's at a time: float[batch rows n] blocks, so the autoregressive
policy's 3906 responses per prompt need tens of MB, not a 3906 x 3906 table per prompt and tensor (GBs)."""


def exact_measures(scores: Tensor, probs: Tensor, rewards: Tensor) -> dict[str, float]:
    """preference_accuracy and reward_correlation (module docstring) from float[batch n] tables."""
    right, counted = 0.0, 0.0  # float[batch]: the agreeing and the counted pairs' weight, over blocks of a's
    for start in range(0, probs.shape[-1], PAIR_ROWS):
        rows = slice(start, start + PAIR_ROWS)
        weights = probs[:, rows].unsqueeze(-1) * probs.unsqueeze(-2)  # float[batch rows n]
        true_sign = torch.sign(rewards[:, rows].unsqueeze(-1) - rewards.unsqueeze(-2))
        agree = torch.sign(scores[:, rows].unsqueeze(-1) - scores.unsqueeze(-2)) == true_sign
        weights = weights * (true_sign != 0)
        counted = counted + weights.sum((-2, -1))
        right = right + (weights * agree).sum((-2, -1))
    accuracy = right / counted
    centred_s = scores - (probs * scores).sum(-1, keepdim=True)
    centred_r = rewards - (probs * rewards).sum(-1, keepdim=True)
    covariance = (probs * centred_s * centred_r).sum(-1)
    spread = ((probs * centred_s ** 2).sum(-1) * (probs * centred_r ** 2).sum(-1)).sqrt()
    return {"preference_accuracy": float(accuracy.mean()), "reward_correlation": float((covariance / spread).mean())}


@dataclass
class Fit:
    """What a fit leaves besides the model and its final metrics: its settings, its data and its curve."""

    config: dict
    chosen: Tensor
    """int[batch N]: each pair's preferred response, an index into the enumerated responses"""
    rejected: Tensor
    history: dict[str, list[float]] = field(default_factory=dict)
    """per optimizer step, before it: the loss and TRL's `accuracy` and `margin` on the training pairs"""


def train_reward_model(policy: nn.Module, prompts: Tensor, reward, config: RewardModelConfig):
    """Draw the pairs from `policy`, fit the model; return it, its final metrics and the `Fit`."""
    generator = torch.Generator().manual_seed(config.seed)
    responses = varlen.enumerate_responses(policy)
    with torch.no_grad():
        probs = varlen.all_probs(policy, prompts, torch.float64)
    rewards = varlen.reward_table(policy, prompts, reward).double()
    chosen, rejected = draw_pairs(probs, rewards, config, generator)
    model = RewardMLP(policy.vocab_size, prompts.shape[1], responses.shape[1], SIZES[config.size], generator).double()
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    batch_prompts = prompts.unsqueeze(1)  # int[batch 1 pos_x]
    history = {"loss": [], "accuracy": [], "margin": []}
    for _ in range(config.steps):
        optimizer.zero_grad()
        chosen_scores = model(batch_prompts, responses[chosen]).flatten()
        rejected_scores = model(batch_prompts, responses[rejected]).flatten()
        loss = reward_model_loss(chosen_scores, rejected_scores, config.margin, config.center_rewards_coefficient)
        for name, value in {"loss": float(loss.detach()), **reward_model_metrics(chosen_scores.detach(),
                                                                        rejected_scores.detach())}.items():
            history[name].append(value)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        chosen_scores = model(batch_prompts, responses[chosen]).flatten()
        rejected_scores = model(batch_prompts, responses[rejected]).flatten()
        scores = model(batch_prompts, responses.unsqueeze(0))
    metrics = {"loss": float(reward_model_loss(chosen_scores, rejected_scores, config.margin,
                                               config.center_rewards_coefficient)),
               **reward_model_metrics(chosen_scores, rejected_scores), **exact_measures(scores, probs, rewards),
               "parameters": model.parameter_count(), "pairs": int(chosen.numel())}
    return model, metrics, Fit(asdict(config), chosen, rejected, history)
