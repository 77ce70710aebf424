"""Exact state and action values of a policy, and the exact expected GAE advantage of any critic.

The factorised policy chooses a whole response from the prompt alone: one state x, one action y,

    V^pi(x) = J(x) = sum_y pi(y | x) R(x, y)          Q^pi(x, y) = R(x, y)          E[A | x, y] = R(x, y) - V(x)

for a critic V and every lambda (one step: GAE is R - V(x) on every token). The autoregressive
policy's state before token q is the prompt and the content prefix u (|u| = q < L); its action is
the next token w, content or EOS. A response ends at EOS or after L tokens (truncation), and then
the value is 0. Over the prefix tree (`lab.exact.prefix_tree`, levels q = L-1 down to 0):

    Q^pi(u, w)   = R(u)                                       w = EOS          (the response u, ended)
                 = R(u w)                                     q = L-1          (truncated at the cap)
                 = V^pi(u w)                                  otherwise
    V^pi(u)      = sum_w p(w | u) Q^pi(u, w)

and for any critic V (tables in the same layout), with gamma = 1 and r the terminal reward, the
expected GAE(lambda) advantage of token w at state u is the same backward recursion (the
transition u -> u w is deterministic, so only later tokens are random):

    Ahat(u, w)   = r(u, w) + V(u w) - V(u) + lambda sum_w' p(w' | u w) Ahat(u w, w')     (V, Ahat = 0 after the end)

Layout: level q holds the V^q content prefixes in mixed radix (u_0 most significant), states
float[... batch V^q], actions float[... batch V^q vocab+1] (EOS last); any leading axes (`run`)
of the policy's parameters are kept. The expected policy gradient under GAE advantages and the
exact critic error are in `lab.exact.critic_error`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lab.exact import varlen
from lab.exact.prefix_tree import prefix_log_softmaxes
from lab.policies import ops_of

Tables = Tensor | list[Tensor]
"""float[... batch] (the factorised policy: one state per prompt) or one float[... batch V^q (...)] per level q."""


def is_autoregressive(policy: nn.Module) -> bool:
    return ops_of(policy).eos(policy) is not None


def tree_levels(policy: nn.Module, prompts: Tensor, dtype: torch.dtype = torch.float64) -> list[Tensor]:
    """log p(. | x, u) at every content prefix: float[... batch V^q vocab+1] per level q (detached)."""
    params = {name: p.detach().to(dtype) for name, p in policy.named_parameters()}
    return prefix_log_softmaxes(params, prompts)


def reward_table(policy: nn.Module, prompts: Tensor, reward, dtype: torch.dtype = torch.float64) -> Tensor:
    """R(x, y) of every enumerated response (`lab.exact.varlen` order): float[... batch n]. `reward` is a
    reward name or function (`lab.exact.varlen.reward_table`), or already such a table, which may carry
    leading axes (one reward per run)."""
    if isinstance(reward, Tensor) and reward.dim() > 2:
        return reward.to(dtype)
    return varlen.reward_table(policy, prompts, reward).to(dtype)


def terminal_levels(policy: nn.Module, prompts: Tensor, reward, dtype: torch.dtype = torch.float64) -> list[Tensor]:
    """r(u, w): the reward of the response that action w ends, 0 where it does not end one:
    float[... batch V^q vocab+1] per level q (EOS ends a response everywhere, any token at q = L-1)."""
    table = reward_table(policy, prompts, reward, dtype)  # float[... batch n]
    vocab, length = policy.vocab_size, policy.response_length
    blocks = list(table.split([vocab ** c for c in range(length + 1)], dim=-1))  # content length c = 0..L
    levels = []
    for q in range(length):
        level = table.new_zeros(*table.shape[:-1], vocab ** q, vocab + 1)
        level[..., vocab] = blocks[q]  # u, then EOS
        if q == length - 1:
            level[..., :vocab] = blocks[length].unflatten(-1, (vocab ** q, vocab))  # u w, truncated
        levels.append(level)
    return levels


def _backward(levels: list[Tensor], terminal: list[Tensor], values: list[Tensor] | None, lam: float) -> list[Tensor]:
    """The recursion of the module docstring, from the last level to the first: per level q, the table
    over actions float[... batch V^q vocab+1] (Q^pi when `values` is None, else Ahat of the critic)."""
    vocab = levels[0].shape[-1] - 1
    out: list[Tensor] = [None] * len(levels)  # type: ignore[list-item]
    following = None  # level q+1: sum_w' p(w' | u w) (Q or Ahat)(u w, w'), float[... batch V^(q+1)]
    for q in reversed(range(len(levels))):
        table = terminal[q] if values is None else terminal[q] - values[q].unsqueeze(-1)  # r - V(u)
        if following is not None:
            after = following.unflatten(-1, (-1, vocab))  # float[... batch V^q V]: the children u w
            if values is None:
                content = after  # Q(u, w) = V^pi(u w)
            else:
                content = table[..., :vocab] + values[q + 1].unflatten(-1, (-1, vocab)) + lam * after
            shape = torch.broadcast_shapes(content.shape, table[..., :vocab].shape)  # a run axis from either
            table = torch.cat([content.expand(shape), table[..., vocab:].expand(*shape[:-1], 1)], dim=-1)
        out[q] = table
        following = (levels[q].exp() * table).sum(-1)
    return out


def state_values(policy: nn.Module, prompts: Tensor, reward, dtype: torch.dtype = torch.float64,
                 levels: list[Tensor] | None = None) -> Tables:
    """V^pi at every state: float[... batch] (factorised: the prompt) or float[... batch V^q] per level q.
    `levels` (`tree_levels`) may be passed when at hand."""
    if not is_autoregressive(policy):
        return (factorised_probs(policy, prompts, dtype) * reward_table(policy, prompts, reward, dtype)).sum(-1)
    levels = tree_levels(policy, prompts, dtype) if levels is None else levels
    q_values = _backward(levels, terminal_levels(policy, prompts, reward, dtype), None, 0.0)
    return [(level.exp() * table).sum(-1) for level, table in zip(levels, q_values)]


@torch.no_grad()
def factorised_probs(policy: nn.Module, prompts: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    """pi(y | x) of every response of the factorised policy (one policy or a stack): float[... batch n], from
    its per-position log-softmaxes (the product over positions), in `lab.exact.enumeration` order."""
    log_softmax = torch.log_softmax(policy(prompts).to(dtype), dim=-1)  # float[... batch pos vocab]
    length = log_softmax.shape[-2]
    responses = varlen.enumerate_responses(policy).to(prompts.device)  # int[n pos]
    positions = torch.arange(length, device=prompts.device)
    return log_softmax[..., positions, responses].sum(-1).exp()  # float[... batch n]


def action_values(policy: nn.Module, prompts: Tensor, reward, dtype: torch.dtype = torch.float64) -> Tables:
    """Q^pi at every (state, action): float[batch n] (factorised: R(x, y)) or float[... batch V^q vocab+1] per level."""
    if not is_autoregressive(policy):
        return reward_table(policy, prompts, reward, dtype)
    levels = tree_levels(policy, prompts, dtype)
    return _backward(levels, terminal_levels(policy, prompts, reward, dtype), None, 0.0)


def gae_advantages_exact(policy: nn.Module, prompts: Tensor, reward, values: Tables, lam: float = 1.0,
                         dtype: torch.dtype = torch.float64) -> Tables:
    """E[A_t^lambda | s_t, a_t] for a critic's `values` (the layout of `state_values`): float[... batch n]
    (factorised: R(x, y) - V(x), whatever lambda) or float[... batch V^q vocab+1] per level q."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must lie in [0, 1], got {lam}")
    if not is_autoregressive(policy):
        return reward_table(policy, prompts, reward, dtype) - values.to(dtype).unsqueeze(-1)
    levels = tree_levels(policy, prompts, dtype)
    return _backward(levels, terminal_levels(policy, prompts, reward, dtype), [v.to(dtype) for v in values], lam)


def visit_probs(policy: nn.Module, prompts: Tensor, dtype: torch.dtype = torch.float64,
                levels: list[Tensor] | None = None) -> Tables:
    """P(s_t = u | x): the probability that a response reaches each state, float[... batch] (factorised: 1)
    or float[... batch V^q] per level q (the prefix u drawn with no EOS before it)."""
    if not is_autoregressive(policy):
        return torch.ones(len(prompts), dtype=dtype)
    levels = tree_levels(policy, prompts, dtype) if levels is None else levels
    vocab = levels[0].shape[-1] - 1
    weight, out = torch.ones_like(levels[0][..., 0]), []
    for level in levels:
        out.append(weight)
        weight = (weight.unsqueeze(-1) * level[..., :vocab].exp()).flatten(-2)
    return out


def prefix_index(responses: Tensor, vocab_size: int) -> Tensor:
    """The row of level t holding each response's prefix y_<t (mixed radix): int[... pos] -> int[... pos].
    Meaningless after EOS (the prefix is no state there); mask with the live tokens."""
    index, rows = torch.zeros_like(responses[..., 0]), []
    for t in range(responses.shape[-1]):
        rows.append(index)
        index = index * vocab_size + responses[..., t].clamp_max(vocab_size - 1)
    return torch.stack(rows, dim=-1)


def on_responses(policy: nn.Module, tables: Tables, responses: Tensor) -> Tensor:
    """A state table read at the state before every position of every response: responses int[n pos]
    -> float[... batch n pos], 0 on padding after EOS."""
    if not is_autoregressive(policy):
        return tables[..., None, None].expand(*tables.shape, *responses.shape)
    index, mask = prefix_index(responses, policy.vocab_size), varlen.live_mask(policy, responses)
    columns = [table[..., index[:, t].clamp_max(table.shape[-1] - 1)] for t, table in enumerate(tables)]
    return torch.stack(columns, dim=-1) * mask
