"""Claim 29 (docs/claims.md): clipping a run's gradient to a global norm changes only its length, never its
direction: g' = c g with c = min(1, N / (||g|| + 1e-6)), so cos(g', g) = 1 and ||g'|| = min(||g||, N) (up to
the 1e-6 of torch's clip_grad_norm_).

Pascanu, Mikolov and Bengio (2013), "On the difficulty of training recurrent neural networks", section 3.2
(gradient norm clipping rescales the gradient, keeping its direction); torch.nn.utils.clip_grad_norm_, TRL's
`max_grad_norm`. Exact: the gradients are random float64 tensors with a leading run axis, as a batched sweep's.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.proofs.proof_tools import close

from lab.training.clipping import CLIP_EPS, clip_coefficients, run_grad_norms

SHAPES = [(3, 4), (2,), (5, 2, 3)]
"""The non-run shapes of a run's parameters: several tensors, as a policy's embedding, encoder, decoder."""


def gradients(seed: int, runs: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    scales = torch.rand(len(SHAPES), generator=generator, dtype=torch.float64) * 10  # tensors of unequal sizes
    return [torch.randn(runs, *shape, generator=generator, dtype=torch.float64) * s for shape, s in zip(SHAPES, scales)]


def flat(grads: list[torch.Tensor]) -> torch.Tensor:
    """Each run's whole gradient as one vector, float[run n]."""
    return torch.cat([g.flatten(1) for g in grads], dim=1)


def clipped(grads: list[torch.Tensor], max_norms: torch.Tensor) -> list[torch.Tensor]:
    coef = clip_coefficients(run_grad_norms(grads), max_norms)
    return [g * coef.view(-1, *[1] * (g.dim() - 1)) for g in grads]


@given(seed=st.integers(0, 2**31 - 1), runs=st.integers(1, 4), limit=st.sampled_from([0.01, 0.5, 1.0, 3.0, 100.0]))
def test_claim_29_clipping_changes_only_the_length_of_each_runs_gradient(seed, runs, limit):
    """For every run, the clipped gradient is a positive multiple of the gradient (cosine 1) whose norm is
    min(||g||, N) (Pascanu et al. 2013, section 3.2). Mutant: clipping each parameter tensor to the limit on its
    own (a per-tensor norm) turns the gradient wherever the tensors' norms differ."""
    grads = gradients(seed, runs)
    max_norms = torch.full((runs,), limit, dtype=torch.float64)
    before, after = flat(grads), flat(clipped(grads, max_norms))
    norms = before.norm(dim=1)
    assert close(torch.nn.functional.cosine_similarity(before, after, dim=1), torch.ones(runs, dtype=torch.float64))
    expected = torch.where(norms > limit, limit * norms / (norms + CLIP_EPS), norms)
    assert close(after.norm(dim=1), expected)

    factors = torch.stack([(limit / (g.flatten(1).norm(dim=1) + CLIP_EPS)).clamp(max=1) for g in grads])  # [tensor run]
    per_tensor = flat([g * f.view(-1, *[1] * (g.dim() - 1)) for g, f in zip(grads, factors)])
    turned = torch.nn.functional.cosine_similarity(before, per_tensor, dim=1)
    unequal = factors.amax(0) > factors.amin(0) * (1 + 1e-3)  # a tensor clipped by another factor than the others
    assert bool((turned[unequal] < 1 - 1e-9).all())
    if limit <= 0.5:  # below every tensor's norm here: the mutant always has cases to fail on
        assert bool(unequal.any())


@given(seed=st.integers(0, 2**31 - 1), runs=st.integers(2, 4))
def test_claim_29_each_run_is_clipped_by_its_own_norm_as_torch_clips_it_alone(seed, runs):
    """Inside a batch every run's gradient is what torch.nn.utils.clip_grad_norm_ makes of that run's gradient
    alone, with that run's own limit (one of them: no limit). Mutant: one norm over the whole batch (the runs'
    gradients as one vector) clips runs by each other's size."""
    grads = gradients(seed, runs)
    max_norms = torch.linspace(0.5, 4.0, runs, dtype=torch.float64)
    max_norms[-1] = torch.inf
    batched = clipped(grads, max_norms)
    for r in range(runs):
        alone = [torch.nn.Parameter(g[r].clone()) for g in grads]
        for p, g in zip(alone, grads):
            p.grad = g[r].clone()
        torch.nn.utils.clip_grad_norm_(alone, float(max_norms[r]))
        assert all(close(b[r], p.grad) for b, p in zip(batched, alone))

    whole = flat(grads).norm()
    joint = [g * (max_norms.view(-1, *[1] * (g.dim() - 1)) / (whole + CLIP_EPS)).clamp(max=1) for g in grads]
    assert not all(close(j, b) for j, b in zip(joint, batched))
