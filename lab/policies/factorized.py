"""The lecture's toy policy: a shared embedding, linear encode/decode, tied output.

    h          = sum_p  E[x_p] @ A_p                    (A_p: encode matrix of prompt position p)
    logits_q   = (h @ B_q) @ E^T                        (B_q: decode matrix of response position q)
    pi(y | x)  = prod_q softmax(logits_q)[y_q]

Every response position is sampled independently given the prompt (not
autoregressive), so `log pi(y | x)` is the sum of the per-position log-probs and
the whole response distribution factorises; that is what makes exact
enumeration (`lab.exact`) possible.

Parameters may carry a leading `run` axis: `PolicyStack` holds R independent
policies as one set of tensors so R runs train as one batched computation.
`policy_logits` is written once with `...` for that optional axis.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from lab.policies.interface import PolicyKind, PolicyOps
from lab.policies.sampling import greedy_responses, sample_responses


def init_parameters(
    vocab_size: int,
    prompt_length: int,
    response_length: int,
    dim: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    init_scale: float = 1.0,
    dtype: torch.dtype | None = None,
) -> dict[str, Tensor]:
    """Draw one policy's parameters: E ~ N(0, 1) (as nn.Embedding), A_p, B_q ~ N(0, 1/dim); then E *= init_scale.

    The draws are the lecture's whatever the scale (same generator calls), so a scale of 1 gives
    exactly the lecture's parameters and any other scale the same directions, shrunk or stretched.
    `dtype` float64 draws in float64 (`--dtype float64`): torch's float32 normals differ in their last bits
    between CPU kernel sets, its float64 ones do not (tests/training/test_dtype.py), so a float64 run starts
    from the same parameters on every machine. (They are other draws than the float32 ones.)
    """
    device = generator.device if generator is not None else device

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, device=device, dtype=dtype)

    scale = 1.0 / math.sqrt(dim)  # keeps h and logits O(1) at initialisation
    params = {
        "embedding": randn(vocab_size, dim),  # float[vocab dim]
        "encode": randn(prompt_length, dim, dim) * scale,  # float[pos dim dim]
        "decode": randn(response_length, dim, dim) * scale,  # float[pos dim dim]
    }
    if init_scale != 1.0:  # logits are quadratic in E (it enters h and the output): 0.1 flattens them 100x
        params["embedding"] = params["embedding"] * init_scale
    return params


def embed(embedding: Tensor, prompts: Tensor) -> Tensor:
    """Rows of E for every prompt token: float[... vocab dim] -> float[... (batch pos) dim].

    `prompts` is int[batch pos] shared by every leading index (a sweep's runs all see
    the same prompts), or int[... batch pos] with the embedding's leading axes.
    An index lookup, not a one-hot matmul: its backward is one scatter-add instead of
    a batched matmul (about 20x cheaper at 500 runs).
    """
    if prompts.dim() == 2:
        return embedding.index_select(-2, prompts.flatten())
    index = prompts.flatten(-2).unsqueeze(-1).expand(*prompts.shape[:-2], -1, embedding.shape[-1])
    return embedding.expand(*index.shape[:-2], *embedding.shape[-2:]).gather(-2, index)


def policy_logits(embedding: Tensor, encode: Tensor, decode: Tensor, prompts: Tensor) -> Tensor:
    """Logits of every response position.

    embedding float[... vocab dim], encode float[... pos dim dim], decode float[... pos dim dim],
    prompts int[... batch pos]  ->  float[... batch pos vocab] (pos = response positions).
    """
    dim = embedding.shape[-1]
    batch, pos = prompts.shape[-2:]
    response_length = decode.shape[-3]
    # Each einsum is computed as one matmul per run (same sums, far less per-call
    # overhead than einsum's dispatch); the einops pattern is kept beside it.
    # "... vocab dim, ... batch pos -> ... batch pos dim": a row lookup, E[x_p]
    x = embed(embedding, prompts)  # float[... (batch pos) dim]
    # "... batch pos dim_in, ... pos dim_in dim -> ... batch dim": one sum over (pos dim_in)
    h = x.reshape(*x.shape[:-2], batch, pos * dim) @ encode.flatten(-3, -2)  # float[... batch dim]
    # "... batch dim_in, ... pos dim_in dim -> ... batch pos dim": all positions in one product
    z = h @ decode.transpose(-3, -2).flatten(-2)  # float[... batch (pos dim)]
    # "... batch pos dim, ... vocab dim -> ... batch pos vocab"
    logits = z.reshape(*z.shape[:-2], batch * response_length, dim) @ embedding.transpose(-1, -2)
    return logits.unflatten(-2, (batch, response_length))


class Policy(nn.Module):
    """One policy of the lecture's shape.

    `forward(prompts: int[batch pos]) -> float[batch pos vocab]` gives the logits of
    every response position; sampling and log-probs live in `lab.policies.sampling`.
    """

    def __init__(
        self,
        vocab_size: int,
        prompt_length: int,
        response_length: int,
        dim: int = 10,
        generator: torch.Generator | None = None,
        init_scale: float = 1.0,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.vocab_size, self.prompt_length, self.response_length, self.dim = (
            vocab_size, prompt_length, response_length, dim,
        )
        params = init_parameters(vocab_size, prompt_length, response_length, dim, generator, init_scale=init_scale,
                                 dtype=dtype)
        self.embedding = nn.Parameter(params["embedding"])
        self.encode = nn.Parameter(params["encode"])
        self.decode = nn.Parameter(params["decode"])

    def forward(self, prompts: Tensor) -> Tensor:
        return policy_logits(self.embedding, self.encode, self.decode, prompts)


class PolicyStack(nn.Module):
    """R independent policies with a leading run axis on every parameter.

    Run r is initialised from `generators[r]` exactly as `Policy(..., generator=generators[r])`
    would be (with `init_scales[r]`, default 1), so a seed's run starts from the same parameters
    alone or inside a sweep. `forward(prompts: int[batch pos]) -> float[run batch pos vocab]`.
    """

    def __init__(
        self,
        vocab_size: int,
        prompt_length: int,
        response_length: int,
        dim: int,
        generators: list[torch.Generator],
        init_scales: list[float] | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.vocab_size, self.prompt_length, self.response_length, self.dim = (
            vocab_size, prompt_length, response_length, dim,
        )
        init_scales = init_scales or [1.0] * len(generators)
        per_run = [init_parameters(vocab_size, prompt_length, response_length, dim, g, init_scale=s, dtype=dtype)
                   for g, s in zip(generators, init_scales)]
        self.embedding = nn.Parameter(torch.stack([p["embedding"] for p in per_run]))  # float[run vocab dim]
        self.encode = nn.Parameter(torch.stack([p["encode"] for p in per_run]))  # float[run pos dim dim]
        decode = torch.stack([p["decode"] for p in per_run])  # float[run pos dim dim]
        # Speed path: kept in memory as [run dim pos dim], so the decode matrix [dim (pos dim)] of every
        # product (policy_logits, lab.policies.fused) is a view and its gradient needs no transposed copy;
        # values, gradients and Adam steps bitwise those of the contiguous (plain) stack (tests/policies/test_fused.py).
        # Measured: the fused forward, backward and Adam of 500 runs x 1000 steps at one thread take 4.01 s
        # CPU stored so against 4.33 s contiguous (medians of 7 interleaved pairs; best 3.61 against 4.10),
        # 5-7% of the 500-run one-thread `lab bench` row (6.7 s CPU on the same busy 2-core machine)
        self.decode = nn.Parameter(decode.transpose(1, 2).contiguous().transpose(1, 2))

    @property
    def num_runs(self) -> int:
        return self.embedding.shape[0]

    def forward(self, prompts: Tensor) -> Tensor:
        # int[batch pos] prompts are shared by every run; int[run batch pos] gives each its own
        return policy_logits(self.embedding, self.encode, self.decode, prompts)

    def unstack(self, run: int) -> Policy:
        """Run `run` as a standalone `Policy` (a copy: training one does not move the other)."""
        policy = Policy(self.vocab_size, self.prompt_length, self.response_length, self.dim)
        return load_run(policy, dict(self.named_parameters()), run).to(self.embedding.device)


def load_run(policy: nn.Module, state: dict[str, Tensor], run: int) -> nn.Module:
    """Copy run `run` of a stacked state (name -> float[run ...]) into one policy of that shape; return it.
    Rebuilding a policy of either kind from a state is `lab.policies.policy_from_state`."""
    with torch.no_grad():
        for name, value in state.items():
            getattr(policy, name).copy_(value[run])
    return policy


def save_policy(policy: Policy, path) -> None:
    """Save a policy's parameters (a run folder's `policy.pt`; `lab.policies.load_policy` reads it back)."""
    torch.save({name: p.detach().cpu() for name, p in policy.named_parameters()}, path)


# The lecture's model behind the policy interface (lab.policies.interface): logits do not depend
# on the response, so the teacher-forced logits are the prompt's broadcast over trials, and every
# response has the same length (no EOS, no mask).

def _logits(params: dict[str, Tensor], prompts: Tensor) -> Tensor:
    return policy_logits(params["embedding"], params["encode"], params["decode"], prompts)


def token_logits(params: dict[str, Tensor], prompts: Tensor, responses: Tensor) -> Tensor:
    """float[... batch trial pos vocab]: the same logits for every trial."""
    logits = _logits(params, prompts).unsqueeze(-3)  # float[... batch 1 pos vocab]
    return logits.expand(*logits.shape[:-4], logits.shape[-4], responses.shape[-2], *logits.shape[-2:])


OPS = PolicyOps(
    kind=PolicyKind.factorized,
    classes=(Policy, PolicyStack),
    token_logits=token_logits,
    sample=lambda params, prompts, num_trials, generator=None: sample_responses(
        _logits(params, prompts), num_trials, generator),
    greedy=lambda params, prompts: greedy_responses(_logits(params, prompts)),
    eos=lambda policy: None,
    build=PolicyStack,
    single=lambda vocab_size, prompt_length, max_length, dim, generator=None, init_scale=1.0: Policy(
        vocab_size, prompt_length, max_length, dim, generator, init_scale),
)
