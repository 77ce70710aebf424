"""An autoregressive policy in the lecture's style, with an end-of-sequence token.

    h          = sum_p  E[x_p] @ A_p                                (the lecture's encoder, unchanged)
    z_q        = h @ B_q  +  sum_{j<q} E[y_j] @ C_qj                (C_qj: previous-token matrix, j < q)
    logits_q   = z_q @ E^T                                          over V + 1 tokens: 0..V-1 and EOS = V
    pi(y | x)  = prod_{q < |y|} softmax(logits_q)[y_q]

The embedding E[(V + 1) dim] is tied as in the lecture, with one extra row for EOS. A response
is int[pos] with pos = max_length: it ends at its first EOS, and every position after that
holds EOS again as padding, which is masked out (`response_mask`): padding has no log-prob,
no loss, no KL and no metric. |y| counts the live tokens, the EOS included. A response that
reaches max_length without EOS is truncated there: it has max_length live tokens, all content,
and the rewards score those content tokens like any other response (each task's `variable_length_rewards`, `tasks.windows`).

Initialisation follows the lecture's rules and draws the lecture model's parameters first
(`lab.policies.factorized.init_parameters`), then the EOS row of E ~ N(0, 1) and C_qj ~ N(0, 1/dim); so
with every C = 0 the first V columns of the logits are the lecture model's logits from the same
generator, and conditioned on never choosing EOS the response distribution is the lecture's
(tests/policies/test_autoregressive.py). C_qj for j >= q stays exactly zero (the forward masks it).
Every parameter may carry a leading `run` axis (`AutoregressiveStack`). The equations are pure
functions in `lab.policies.ar_model`; decoding (sampling, greedy) is `lab.policies.ar_decoding`;
the training loop's fast log-probs `lab.policies.ar_fused`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lab.policies.ar_decoding import greedy, sample
from lab.policies.ar_model import init_autoregressive, teacher_forced_logits
from lab.policies.factorized import load_run
from lab.policies.interface import PolicyKind, PolicyOps


class AutoregressivePolicy(nn.Module):
    """One autoregressive policy. `forward(prompts, responses)` gives teacher-forced logits
    float[batch trial pos vocab+1]; `vocab_size` counts content tokens, `eos` = vocab_size."""

    def __init__(self, vocab_size: int, prompt_length: int, max_length: int, dim: int = 10,
                 generator: torch.Generator | None = None, init_scale: float = 1.0) -> None:
        super().__init__()
        self.vocab_size, self.prompt_length, self.response_length, self.dim = (
            vocab_size, prompt_length, max_length, dim)
        params = init_autoregressive(vocab_size, prompt_length, max_length, dim, generator, init_scale=init_scale)
        for name, value in params.items():
            setattr(self, name, nn.Parameter(value))

    @property
    def eos(self) -> int:
        return self.vocab_size

    @property
    def max_length(self) -> int:
        return self.response_length

    def forward(self, prompts: Tensor, responses: Tensor) -> Tensor:
        return teacher_forced_logits(self.embedding, self.encode, self.decode, self.previous, prompts, responses)


class AutoregressiveStack(AutoregressivePolicy):
    """R independent autoregressive policies with a leading run axis on every parameter.

    Run r is initialised from `generators[r]` (and `init_scales[r]`, default 1) exactly as
    `AutoregressivePolicy(..., generator=generators[r], init_scale=init_scales[r])`.
    `forward(prompts int[batch pos] or int[run batch pos], responses int[run batch trial pos])`.
    """

    def __init__(self, vocab_size: int, prompt_length: int, max_length: int, dim: int,
                 generators: list[torch.Generator], init_scales: list[float] | None = None,
                 dtype: torch.dtype | None = None) -> None:
        nn.Module.__init__(self)
        self.vocab_size, self.prompt_length, self.response_length, self.dim = (
            vocab_size, prompt_length, max_length, dim)
        scales = init_scales or [1.0] * len(generators)
        per_run = [init_autoregressive(vocab_size, prompt_length, max_length, dim, g, init_scale=s, dtype=dtype)
                   for g, s in zip(generators, scales)]
        stacked = {name: torch.stack([p[name] for p in per_run]) for name in per_run[0]}
        # Speed path: kept in memory as [run d q e] and [run d j q e], so the fused log-probs' matrices of
        # decode [d (q e)] and of previous [d (j q e)] (`lab.policies.ar_fused`) are views and their
        # gradients need no permuted copies (lab.training.optim updates them in that memory order); bitwise
        # the contiguous (plain) stack's values, gradients and Adam steps (tests/policies/test_fused.py).
        # Measured: the fused forward, backward and Adam of 500 runs take 1.41 s CPU per 50 steps stored so
        # against 1.91 s contiguous (medians of 5 interleaved pairs), about 0.1 s of an epoch's 0.45 s:
        # about 20% of the 500-run autoregressive `lab bench` row (busy 2-core machine, one thread)
        stacked["decode"] = stacked["decode"].transpose(1, 2).contiguous().transpose(1, 2)
        stacked["previous"] = stacked["previous"].permute(0, 3, 2, 1, 4).contiguous().permute(0, 3, 2, 1, 4)
        for name, value in stacked.items():
            setattr(self, name, nn.Parameter(value))

    @property
    def num_runs(self) -> int:
        return self.embedding.shape[0]

    def unstack(self, run: int) -> AutoregressivePolicy:
        """Run `run` as a standalone policy (a copy)."""
        policy = AutoregressivePolicy(self.vocab_size, self.prompt_length, self.response_length, self.dim)
        return load_run(policy, dict(self.named_parameters()), run).to(self.embedding.device)


def _unpack(params: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return params["embedding"], params["encode"], params["decode"], params["previous"]


OPS = PolicyOps(
    kind=PolicyKind.autoregressive,
    classes=(AutoregressivePolicy, AutoregressiveStack),
    token_logits=lambda params, prompts, responses: teacher_forced_logits(*_unpack(params), prompts, responses),
    sample=lambda params, prompts, num_trials, generator=None: sample(
        *_unpack(params), prompts, num_trials, generator),
    greedy=lambda params, prompts: greedy(*_unpack(params), prompts),
    eos=lambda policy: policy.vocab_size,
    build=AutoregressiveStack,
    single=AutoregressivePolicy,
)
