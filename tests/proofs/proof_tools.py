"""Shared inputs and checks for the proofs: random toy policies, reward tables, tolerances, and the
exact quantities several claims are checked against.

A toy is a `Policy` in float64 drawn from a seeded `torch.Generator`, a few prompts and a
reward table float[batch n] over `lab.exact.all_responses` (integers, so ties and
constant groups occur, or continuous values). Hypothesis draws the seed, the shapes and G.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import assume
from hypothesis import strategies as st

from lab.exact.enumeration import all_log_probs, all_responses, expected_reward, flat_grad, position_log_probs
from lab.exact.estimators import gradient_moments
from lab.policies.factorized import Policy
from lab.policies.sampling import response_log_probs, sample_responses


@dataclass(frozen=True)
class Tolerance:
    """How close two exact float64 results must be; `differs` is the margin a counterexample needs."""

    rtol: float = 1e-9
    atol: float = 1e-10
    differs: float = 1e-4


TOL = Tolerance()


def close(a: torch.Tensor, b: torch.Tensor, tol: Tolerance = TOL) -> bool:
    return torch.allclose(a, b.to(a), rtol=tol.rtol, atol=tol.atol)


def angle_deg(a: torch.Tensor, b: torch.Tensor) -> float:
    """The angle between two flat vectors, in degrees."""
    cosine = (a @ b) / (a.norm() * b.norm())
    return math.degrees(math.acos(float(cosine.clamp(-1, 1))))


@dataclass
class Toy:
    policy: Policy
    prompts: torch.Tensor  # int[batch pos]
    rewards: torch.Tensor  # float[batch n]
    generator: torch.Generator

    @property
    def vocab_size(self) -> int:
        return self.policy.vocab_size

    @property
    def length(self) -> int:
        return self.policy.response_length

    def probs(self) -> torch.Tensor:
        return all_log_probs(self.policy, self.prompts).exp().detach()

    def grad_j(self) -> torch.Tensor:
        """grad J per prompt by autograd of the exact J: float[batch params]."""
        return torch.stack([
            flat_grad(expected_reward(self.policy, self.prompts[b:b + 1], self.rewards[b:b + 1]).sum(), self.policy)
            for b in range(len(self.prompts))])


def make_toy(seed: int, vocab_size: int = 3, length: int = 2, prompt_length: int = 2, batch: int = 2,
             dim: int = 3, integer_rewards: bool = True, logit_scale: float = 1.0) -> Toy:
    """A random float64 toy from one seed (parameters, prompts and reward table all from it)."""
    generator = torch.Generator().manual_seed(seed)
    policy = Policy(vocab_size, prompt_length, length, dim=dim, generator=generator).double()
    with torch.no_grad():  # a larger scale gives peakier, less uniform policies
        policy.embedding.mul_(logit_scale)
    prompts = torch.randint(vocab_size, (batch, prompt_length), generator=generator)
    n = len(all_responses(vocab_size, length))
    if integer_rewards:
        rewards = torch.randint(0, 4, (batch, n), generator=generator).double()
    else:
        rewards = torch.rand(batch, n, generator=generator, dtype=torch.float64) * 4 - 1
    return Toy(policy, prompts, rewards, generator)


@st.composite
def toys(draw, min_length: int = 1, max_length: int = 2, max_vocab: int = 3) -> Toy:
    """Random toys with at most max_vocab ** max_length responses per prompt."""
    return make_toy(
        seed=draw(st.integers(0, 2**31 - 1)),
        vocab_size=draw(st.integers(2, max_vocab)),
        length=draw(st.integers(min_length, max_length)),
        prompt_length=draw(st.integers(1, 2)),
        batch=draw(st.integers(1, 2)),
        dim=draw(st.integers(2, 4)),
        integer_rewards=draw(st.booleans()),
        logit_scale=draw(st.sampled_from([0.5, 1.0, 2.0])),
    )


def assume_not_degenerate(toy: Toy, min_prob: float = 1e-4) -> None:
    """A mutant can only be told apart where the policy still puts weight on every response."""
    assume(float(toy.probs().min()) > min_prob)


group_sizes = st.integers(2, 5)
"""G, the responses per prompt (a group), from 2 to 5."""

seeds = st.integers(0, 2**31 - 1)
"""A seed for a `torch.Generator`, for proofs that draw their own tensors."""


def expected_gradient(toy: Toy, mode: str, G: int) -> torch.Tensor:
    """The exact expectation of the per-group estimator with `mode` deltas: float[batch params]."""
    return gradient_moments(toy.policy, toy.prompts, toy.rewards, mode, G, method="values").mean


def kl_tables(toy: Toy, seed_offset: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi_theta (the toy's policy) and log pi_ref (another policy from a shifted seed): float[batch pos vocab]."""
    other = make_toy(int(torch.randint(2**31 - 1, (), generator=toy.generator)) + seed_offset,
                     toy.vocab_size, toy.length, toy.prompts.shape[1], dim=toy.policy.dim)
    return (position_log_probs(toy.policy, toy.prompts).detach(),
            position_log_probs(other.policy, toy.prompts).detach())


def sampled_batch(toy: Toy, G: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Responses int[batch trial pos] from the toy's policy, their log-probs (with gradient) and deltas."""
    logits = toy.policy(toy.prompts)
    responses = sample_responses(logits, G, toy.generator)
    deltas = torch.randn(responses.shape[:-1], generator=toy.generator, dtype=torch.float64)
    return response_log_probs(logits, responses), deltas


LENS_SEEDS = range(5)
"""The random pi_old each descendant's lens claim (45-49) is decided on (logits N(0, 1), float64)."""


def lecture_lens(seed: int):
    """The exact lens's setting of claims 36-40 (lab/exact/surrogate_lens.py): (old logits float64[3 3 5], every
    response int[125 3], advantages r - E_old r float64[3 125]) on the lecture's prompts, inclusion-ordering."""
    from lab.exact.enumeration import reward_table
    from lab.exact.surrogate_lens import population_advantages
    from tasks.sorting import make_task

    task = make_task()
    old = torch.randn(3, 3, 5, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    responses = all_responses(5, 3)
    rewards = reward_table(task.prompts, "inclusion-ordering", 5, 3)
    return old, responses, population_advantages(old, rewards, responses)
