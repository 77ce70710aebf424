"""Shared inputs and checks for the critic's proofs (claims 22-25): an autoregressive toy, every response
enumerated, the lab's GAE run on each of them, and expectations given a state or a (state, action) pair.

A toy is an `AutoregressivePolicy` in float64 from a seeded generator (vocabulary 2-3, a cap of 1-3
tokens, EOS), two prompts, a continuous reward table over every response (`lab.exact.varlen` order) and
a random critic: one value per state (content prefix u of each length t), in `lab.exact.values`' layout.

    E[f_t | s_t = u, a_t = w] = sum_{y through u w} pi(y) f_t(y) / sum_{y through u w} pi(y)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import lab.policies as P
from lab.core.gae import gae_advantages, terminal_rewards
from lab.exact import values as exact_values
from lab.exact import varlen
from lab.exact.enumeration import flat_grad
from lab.policies.autoregressive import AutoregressivePolicy


@dataclass
class CriticToy:
    policy: AutoregressivePolicy
    prompts: torch.Tensor  # int[batch pos]
    rewards: torch.Tensor  # float[batch n]
    critic: list[torch.Tensor]  # float[batch V^t] per level t

    @property
    def responses(self) -> torch.Tensor:
        """int[n pos], every response (EOS = vocab as end and padding)."""
        return varlen.varlen_responses(self.policy.vocab_size, self.policy.response_length)

    @property
    def mask(self) -> torch.Tensor:
        """bool[batch n pos]: the live tokens, EOS included."""
        return varlen.live_mask(self.policy, self.responses).expand(len(self.prompts), *self.responses.shape)

    def probs(self) -> torch.Tensor:
        """pi(y | x), float[batch n]."""
        return varlen.all_probs(self.policy, self.prompts).detach()

    def on_responses(self, tables: list[torch.Tensor]) -> torch.Tensor:
        """A state table at the state before every token: float[batch n pos], 0 on padding."""
        return exact_values.on_responses(self.policy, tables, self.responses)

    def lab_gae(self, tables: list[torch.Tensor], lam: float) -> tuple[torch.Tensor, torch.Tensor]:
        """The lab's GAE (lab.core.gae) on every response with the critic `tables`: (A, targets) float[batch n pos]."""
        return gae_advantages(terminal_rewards(self.rewards, self.mask), self.on_responses(tables), self.mask, lam)

    def grad_j(self) -> torch.Tensor:
        """grad J per prompt, autograd of the exact J: float[batch params]."""
        J = varlen.expected_reward(self.policy, self.prompts, self.rewards)
        return torch.stack([flat_grad(J[b], self.policy) for b in range(len(self.prompts))])

    def expected_token_gradient(self, weights: torch.Tensor) -> torch.Tensor:
        """E_y[sum_t c_t(y) grad log pi(y_t | s_t)] for fixed weights c float[batch n pos]: float[batch params]."""
        rows = self.responses.expand(len(self.prompts), *self.responses.shape)
        log_probs = P.token_log_probs(self.policy, self.prompts, rows)  # float[batch n pos], 0 on padding
        surrogate = (self.probs().unsqueeze(-1) * weights.detach() * log_probs).sum((-2, -1))
        return torch.stack([flat_grad(surrogate[b], self.policy) for b in range(len(self.prompts))])


def make_critic_toy(seed: int, vocab: int = 2, cap: int = 3, critic_scale: float = 1.0) -> CriticToy:
    generator = torch.Generator().manual_seed(seed)
    policy = AutoregressivePolicy(vocab, 2, cap, 3, generator=generator).double()
    prompts = torch.randint(vocab, (2, 2), generator=generator)
    rewards = torch.rand(2, varlen.space_size(vocab, cap), generator=generator, dtype=torch.float64) * 4
    critic = [torch.randn(2, vocab ** t, generator=generator, dtype=torch.float64) * critic_scale for t in range(cap)]
    return CriticToy(policy, prompts, rewards, critic)


def _keys(toy: CriticToy, with_action: bool) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Per position t, the row of each response's state (and action) in level t: int[n] each; and the mask."""
    vocab = toy.policy.vocab_size
    index = exact_values.prefix_index(toy.responses, vocab)  # int[n pos]
    keys = [index[:, t] * (vocab + 1) + toy.responses[:, t] if with_action else index[:, t]
            for t in range(toy.responses.shape[-1])]
    return keys, toy.mask


def given_state(toy: CriticToy, per_token: torch.Tensor, with_action: bool = True) -> list[torch.Tensor]:
    """E[f_t | s_t = u, a_t = w] (float[batch V^t vocab+1] per t) or E[f_t | s_t = u] (float[batch V^t]) from
    per-token values f float[batch n pos], by summing over every enumerated response."""
    vocab, probs = toy.policy.vocab_size, toy.probs()
    keys, mask = _keys(toy, with_action)
    tables = []
    for t, key in enumerate(keys):
        size = vocab ** t * ((vocab + 1) if with_action else 1)
        weight = probs * mask[..., t]  # float[batch n]
        total = torch.zeros(len(probs), size, dtype=probs.dtype).index_add_(1, key, weight * per_token[..., t])
        mass = torch.zeros(len(probs), size, dtype=probs.dtype).index_add_(1, key, weight)
        table = total / mass
        tables.append(table.view(len(probs), vocab ** t, vocab + 1) if with_action else table)
    return tables
