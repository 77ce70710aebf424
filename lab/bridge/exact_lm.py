"""The exact lens on a causal LM: its whole response distribution, by enumeration.

For a prompt x and every response y of the autoregressive policy's space (`lab.exact.varlen`:
content of c < L tokens then EOS, or L content tokens truncated), at sampling temperature T:

    log pi(y | x) = sum_q m_q log softmax(z_q / T)[y_q],   z_q = the model's logits after x, y_<q

with m the live mask (EOS included). Over that space, averaged over the prompts:

    reward_exact      E_pi[r(x, y)]
    entropy_exact     -E_pi[log pi(y | x)]                    (the sequence's entropy, nats)
    kl_exact          E_pi[log pi(y | x) - log pi_0(y | x)]   (KL to the initial model)
    optimal_prob      pi(r(x, y) = max_y' r(x, y'))

One forward pass over every (prompt, response) sequence: P x n rows of n_x + L tokens (n = 781 for
the lecture's V = 5, L = 4), cheap for a tiny model. Because the tokenizer's vocabulary is exactly
the values and EOS (`lab.bridge.tiny_lm`), the probabilities over this space sum to 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lab.exact.varlen import varlen_responses
from lab.policies.ar_model import response_mask
from tasks import OPTIMAL_TOLERANCE

def sequences(prompts: Tensor, responses: Tensor) -> Tensor:
    """Every prompt followed by every response: int[batch n pos_x + pos]."""
    batch, n = prompts.shape[0], responses.shape[0]
    return torch.cat([prompts.unsqueeze(1).expand(batch, n, -1), responses.unsqueeze(0).expand(batch, n, -1)], dim=-1)


@torch.no_grad()
def response_log_probs(model, prompts: Tensor, responses: Tensor, eos: int, temperature: float = 1.0) -> Tensor:
    """log pi(y | x) float64[batch n] of every response int[n pos] (EOS-padded) after every prompt int[batch pos_x]."""
    tokens = sequences(prompts, responses)  # int[batch n pos_x+pos]
    batch, n, width = tokens.shape
    length = responses.shape[1]
    logits = model(input_ids=tokens.reshape(batch * n, width)).logits  # float[batch*n pos_x+pos vocab]
    # the logits at position t predict token t+1: the response's tokens are predicted from pos_x - 1 on
    steps = logits[:, width - length - 1:-1].double() / temperature
    per_token = steps.log_softmax(-1).gather(-1, tokens.reshape(batch * n, width)[:, -length:, None]).squeeze(-1)
    live = response_mask(responses, eos)  # bool[n pos]
    return (per_token.reshape(batch, n, length) * live).sum(-1)


def reward_table(prompts: Tensor, responses: Tensor, reward) -> Tensor:
    """r(x, y) float64[batch n] for a vectorized variable-length reward (prompts, responses) -> float[batch trial]."""
    return reward(prompts, responses.unsqueeze(0).expand(prompts.shape[0], -1, -1)).double()


def exact_metrics(log_probs: Tensor, initial_log_probs: Tensor, rewards: Tensor) -> dict[str, float]:
    """The module's four metrics from log pi, log pi_0 and r, each float64[batch n]."""
    probs = log_probs.exp()
    best = rewards.amax(dim=-1, keepdim=True)
    optimal = (rewards >= best - OPTIMAL_TOLERANCE).double()
    return {
        "reward_exact": float((probs * rewards).sum(-1).mean()),
        "entropy_exact": float(-(probs * log_probs).sum(-1).mean()),
        "kl_exact": float((probs * (log_probs - initial_log_probs)).sum(-1).mean()),
        "optimal_prob": float((probs * optimal).sum(-1).mean()),
    }


def all_responses(vocab_size: int, max_length: int) -> Tensor:
    """The response space int[n pos] (`lab.exact.varlen.varlen_responses`, EOS = vocab_size)."""
    return varlen_responses(vocab_size, max_length)
