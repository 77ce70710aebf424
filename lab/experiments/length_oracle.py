"""The length bias without sampling noise: the exact expected update at initialisation, and its flow.

For the autoregressive policy, every response y up to the cap enumerated (`lab.exact.varlen` order),
right(x, y) = [y is sorted(x) + EOS] (the `exact-match` table) and the run's reward R:

    c_y          = G w(|y|) E[d_1 ; o_1 = y]         w = 1/(G |y|) (seq-mean-token-mean), 1/(G C) (seq-mean-token-sum-norm)
    u            = grad_theta mean_x sum_y c_y log pi(y | x)              the exact expected update E[g]
    f            = E[|o| | wrong] = sum_x sum_{y wrong} pi(y|x) |y| / sum_x sum_{y wrong} pi(y|x)   (pooled, as the
                   sampled `incorrect_length`)
    slope        = (grad f . u) / (grad J . u)        the change of f per unit of expected reward gained along u
    sign         = sign(slope(seq-mean-token-mean) - slope(seq-mean-token-sum-norm)) per seed: the direction in
                   which 1/|o| moves wrong responses' length relative to the constant divisor, predicted exactly
    flow         each epoch: c from the epoch's policy (what its samples estimate), then `steps` Adam steps
                 (the run's lr and betas) on the expected naive surrogate -mean_x sum_y c_y log pi_theta(y | x);
                 f recorded at every epoch's start and at the end: float[run epoch + 1]

Every run of a list of configs is one row of an `AutoregressiveStack`, initialised exactly as the
training loop initialises it (`torch.Generator().manual_seed(config.seed)`, the config's init scale),
in float64. The flow is the expectation of the naive loss's surrogate, not of the sampled runs'
Adam steps (Adam is not linear), so it shows where the expected update leads, not the runs' mean.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from lab.core.aggregation import LossAgg, parse_agg
from lab.exact.estimators import first_moment
from lab.exact.prefix_tree import prefix_log_softmaxes
from lab.exact.varlen import varlen_responses
from lab.policies import make_stack
from lab.policies.ar_model import response_mask
from lab.training.config import TrainConfig
from lab.training.lengths import resolve_max_length

WEIGHTS = {
    LossAgg.seq_mean_token_mean: lambda size, horizon: 1.0 / size,
    LossAgg.seq_mean_token_sum_norm: lambda size, horizon: torch.full_like(size, 1.0 / horizon),
    LossAgg.seq_mean_token_sum: lambda size, horizon: torch.ones_like(size),
}
"""G w(|y|) of the per-sequence aggregations (token-mean couples a group through its divisor: not here)."""


def tree_log_probs(levels: list[Tensor]) -> Tensor:
    """log pi(y | x) of every response from the prefix levels, in `lab.exact.varlen` order: float[... batch n]."""
    content = levels[0].shape[-1] - 1
    log_weight = torch.zeros_like(levels[0][..., 0])  # log P(u | x) of the prefixes of this length
    ended = []
    for log_p in levels:
        ended.append(log_weight + log_p[..., content])  # u followed by EOS
        log_weight = (log_weight.unsqueeze(-1) + log_p[..., :content]).flatten(-2)
    return torch.cat([*ended, log_weight], dim=-1)


class Oracle:
    """The stacked policies of `configs` (shared shapes) on `task`, and their exact tables."""

    def __init__(self, task, configs: list[TrainConfig]):
        self.configs, self.prompts = configs, task.prompts
        first = configs[0]
        self.cap = resolve_max_length(first, task.prompts.shape[1])
        generators = [torch.Generator().manual_seed(c.seed) for c in configs]
        self.stack = make_stack("autoregressive", task.vocab_size, task.prompts.shape[1], self.cap, first.dim,
                                generators, [c.init_scale for c in configs]).double()
        responses = varlen_responses(task.vocab_size, self.cap)
        expanded = responses.expand(task.prompts.shape[0], *responses.shape)
        self.size = response_mask(responses, task.vocab_size).sum(-1).double()  # |y|, EOS counted: float[n]
        self.rewards = torch.stack([task.variable_length_reward(c.reward, task.vocab_size)(task.prompts, expanded)
                                    for c in configs]).double()  # float[run batch n]
        self.right = task.variable_length_reward("exact-match", task.vocab_size)(task.prompts, expanded).double()
        self.weights = torch.stack([WEIGHTS[parse_agg(c.loss_agg)](self.size, self.cap) for c in configs])

    def log_probs(self) -> Tensor:
        """log pi(y | x) float[run batch n], differentiable in the stack's parameters."""
        return tree_log_probs(prefix_log_softmaxes(dict(self.stack.named_parameters()), self.prompts))

    def coefficients(self, probs: Tensor) -> Tensor:
        """c_y float[run batch n] of each run's delta mode and aggregation at probs float[run batch n]."""
        return torch.stack([first_moment(p, r, c.delta, c.group_size, c.std_eps, c.std_unbiased) * w
                            for p, r, c, w in zip(probs, self.rewards, self.configs, self.weights)])

    def wrong_length(self, probs: Tensor) -> Tensor:
        """E[|o| | wrong] pooled over prompts: float[run]."""
        wrong = probs * (1 - self.right)
        return (wrong * self.size).sum(dim=(-2, -1)) / wrong.sum(dim=(-2, -1))

    def slopes(self) -> np.ndarray:
        """(grad f . u) / (grad J . u) per run at the current parameters: float[run] (module docstring)."""
        params = list(self.stack.parameters())
        log_p = self.log_probs()
        probs = log_p.exp()
        c = self.coefficients(probs.detach())

        def grad(value: Tensor) -> list[Tensor]:
            return torch.autograd.grad(value, params, retain_graph=True)

        update = grad((c * log_p).sum(-1).mean(-1).sum())
        along = [(torch.stack([(g * u).flatten(1).sum(1) for g, u in zip(grad(v), update)])).sum(0)
                 for v in (self.wrong_length(probs).sum(), (probs * self.rewards).sum(-1).mean(-1).sum())]
        return (along[0] / along[1]).detach().numpy()

    def flow(self, epochs: int | None = None, progress=None) -> np.ndarray:
        """E[|o| | wrong] per run at the start of every epoch of the expected flow and at its end: float[run epoch+1].
        `progress(epochs done, epochs)` after each epoch."""
        first = self.configs[0]
        epochs = first.epochs if epochs is None else epochs
        optimizer = torch.optim.Adam(self.stack.parameters(), lr=first.lr, betas=first.adam_betas, eps=first.adam_eps)
        lengths = []
        for epoch in range(epochs):
            with torch.no_grad():
                probs = self.log_probs().exp()
                lengths.append(self.wrong_length(probs))
                c = self.coefficients(probs)
            for _ in range(first.steps):
                optimizer.zero_grad()
                (-(c * self.log_probs()).sum(-1).mean(-1).sum()).backward()
                optimizer.step()
            if progress is not None:
                progress(epoch + 1, epochs)
        with torch.no_grad():
            lengths.append(self.wrong_length(self.log_probs().exp()))
        return torch.stack(lengths, dim=-1).numpy()


