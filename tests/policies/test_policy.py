"""The lecture's policy, sampling, log-probs and the per-run Adam (docs/task.md).

    h = sum_p E[x_p] @ A_p,   logits_q = (h @ B_q) @ E^T,   y_q ~ softmax(logits_q) independently.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lab.training.optim import RunAdam
from lab.policies import load_policy, policy_from_state
from lab.policies.factorized import Policy, PolicyStack, save_policy
from lab.policies.sampling import (entropy, greedy_responses, response_log_probs, sample_responses,
                         sequence_log_probs)

Z_LIMIT = 5.0
"""Monte Carlo checks fail beyond 5 standard errors: a false alarm has probability ~5.7e-7 per
two-sided normal check (so ~1e-5 for the few dozen checks of a test), and the fixed seeds make
every run draw the same numbers."""


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def loop_logits(policy: Policy, prompts: list[list[int]]) -> torch.Tensor:
    """The policy (docs/task.md, lab/policies/factorized.py) written as loops: embed, encode per prompt
    position, sum, decode per response position, tie."""
    E, A, B = policy.embedding.detach(), policy.encode.detach(), policy.decode.detach()
    out = torch.zeros(len(prompts), policy.response_length, policy.vocab_size)
    for b, prompt in enumerate(prompts):
        h = torch.zeros(policy.dim)
        for p, token in enumerate(prompt):
            h += E[token] @ A[p]
        for q in range(policy.response_length):
            z = h @ B[q]
            for v in range(policy.vocab_size):
                out[b, q, v] = z @ E[v]  # the output layer is the same embedding (tied)
    return out


def test_shapes_with_distinct_prompt_and_response_lengths():
    """E float[vocab dim], one encode per prompt position, one decode per response position."""
    policy = Policy(vocab_size=6, prompt_length=3, response_length=4, dim=5, generator=seeded(0))
    shapes = {name: tuple(p.shape) for name, p in policy.named_parameters()}
    assert shapes == {"embedding": (6, 5), "encode": (3, 5, 5), "decode": (4, 5, 5)}  # no separate output matrix
    assert policy(torch.tensor([[0, 5, 2], [1, 1, 1]])).shape == (2, 4, 6)
    assert Policy(5, 3, 3).dim == 10  # the lecture's width by default


@given(seed=st.integers(0, 2**31), vocab=st.integers(1, 6), prompt_length=st.integers(1, 4),
       response_length=st.integers(1, 4), dim=st.integers(1, 6))
def test_logits_match_a_loop_over_the_definition(seed, vocab, prompt_length, response_length, dim):
    """docs/task.md: logits = (sum_p E[x_p] A_p) B_q E^T with the input embedding reused as the output layer."""
    policy = Policy(vocab, prompt_length, response_length, dim, generator=seeded(seed))
    prompts = torch.randint(vocab, (3, prompt_length), generator=seeded(seed + 1))
    torch.testing.assert_close(policy(prompts).detach(), loop_logits(policy, prompts.tolist()),
                               rtol=1e-5, atol=1e-5)


def test_initial_scales_are_randn_and_randn_over_sqrt_dim():
    """The lecture's initialisation: E ~ N(0, 1); every encode and decode entry ~ N(0, 1/dim).
    z-tests on mean and variance."""
    dim = 40
    policy = Policy(vocab_size=60, prompt_length=6, response_length=6, dim=dim, generator=seeded(3))
    for name, variance in (("embedding", 1.0), ("encode", 1.0 / dim), ("decode", 1.0 / dim)):
        x = getattr(policy, name).detach().double().flatten()
        n = x.numel()
        assert abs(x.mean().item()) / math.sqrt(variance / n) < Z_LIMIT, name
        # the sample variance of n normals has standard error variance * sqrt(2 / n)
        assert abs(x.var().item() - variance) / (variance * math.sqrt(2 / n)) < Z_LIMIT, name


def test_sampling_frequencies_match_softmax_probabilities():
    """Each position's token frequencies over many trials match softmax(logits).

    Per (prompt, position, token) cell, z = (count - N p) / sqrt(N p (1 - p)) stays below Z_LIMIT.
    A token of probability ~1e-13 is never drawn (an off-by-one in the inverse CDF would draw it).
    """
    logits = torch.tensor([[[2.0, 0.0, -1.0, 0.5], [0.0, 0.0, 0.0, 0.0], [-30.0, 1.0, 1.0, 3.0]],
                           [[5.0, -2.0, 0.3, 0.3], [1.0, 2.0, 3.0, 4.0], [0.0, -30.0, 0.0, -30.0]]])
    trials = 40_000
    responses = sample_responses(logits, trials, seeded(11))
    assert responses.shape == (2, trials, 3) and responses.dtype == torch.long
    counts = torch.nn.functional.one_hot(responses, 4).sum(dim=1).double()  # float[batch pos vocab]
    p = torch.softmax(logits.double(), dim=-1)
    expected = trials * p
    spread = (trials * p * (1 - p)).sqrt()
    z = (counts - expected).abs() / spread.clamp_min(1e-300)
    assert (z < Z_LIMIT).all(), z.max()
    assert counts[0, 2, 0] == 0 and counts[1, 2, 1] == 0 and counts[1, 2, 3] == 0


def test_sampling_depends_only_on_the_generator():
    """Same seed -> same samples, whatever the global RNG; the global RNG is untouched."""
    logits = torch.randn(3, 4, 5, generator=seeded(0))
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = sample_responses(logits, 8, seeded(7))
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(999)
    assert torch.equal(sample_responses(logits, 8, seeded(7)), first)
    assert not torch.equal(sample_responses(logits, 8, seeded(8)), first)
    assert torch.equal(Policy(5, 3, 3, generator=seeded(4)).encode, Policy(5, 3, 3, generator=seeded(4)).encode)


@pytest.mark.parametrize("lead", [(), (2,)])
def test_response_log_probs_match_a_direct_computation(lead):
    """log_probs[..., b, t, q] = log softmax(logits[..., b, q])[y[..., b, t, q]]."""
    g = seeded(5)
    logits = torch.randn(*lead, 3, 4, 6, generator=g, dtype=torch.float64)
    responses = torch.randint(6, (*lead, 3, 5, 4), generator=g)
    out = response_log_probs(logits, responses)
    assert out.shape == (*lead, 3, 5, 4)
    flat_logits, flat_resp, flat_out = logits.reshape(-1, 3, 4, 6), responses.reshape(-1, 3, 5, 4), out.reshape(-1, 3, 5, 4)
    for r in range(flat_logits.shape[0]):
        for b in range(3):
            for t in range(5):
                for q in range(4):
                    row = flat_logits[r, b, q].tolist()
                    log_z = math.log(sum(math.exp(v) for v in row))
                    assert flat_out[r, b, t, q].item() == pytest.approx(row[flat_resp[r, b, t, q]] - log_z, abs=1e-12)
    torch.testing.assert_close(sequence_log_probs(logits, responses), out.sum(-1))
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(entropy(logits), -(p * p.log()).sum(-1))
    assert torch.equal(greedy_responses(logits), logits.argmax(-1))


def test_response_log_probs_broadcast_shared_logits_over_a_run_axis():
    """Logits float[batch pos vocab] score responses int[run batch trial pos] run by run."""
    g = seeded(6)
    logits = torch.randn(2, 3, 4, generator=g)
    responses = torch.randint(4, (3, 2, 5, 3), generator=g)
    out = response_log_probs(logits, responses)
    for r in range(3):
        assert torch.equal(out[r], response_log_probs(logits, responses[r]))


def test_policy_stack_run_r_is_the_policy_of_generator_r():
    """CONTEXT / lab.policies.factorized: run r of a PolicyStack starts, computes and samples like Policy(generator=r)."""
    seeds = [5, 0, 17]
    stack_generators = [seeded(s) for s in seeds]
    stack = PolicyStack(5, 3, 3, 10, stack_generators)
    alone_generators = [seeded(s) for s in seeds]
    alone = [Policy(5, 3, 3, 10, generator=g) for g in alone_generators]
    assert stack.num_runs == 3
    prompts = torch.tensor([[1, 0, 2], [3, 2, 4], [1, 2, 3]])
    stacked_logits = stack(prompts)
    assert stacked_logits.shape == (3, 3, 3, 5)
    for r, policy in enumerate(alone):
        for name, p in policy.named_parameters():
            assert torch.equal(getattr(stack, name)[r], p), name
        torch.testing.assert_close(stacked_logits[r], policy(prompts), rtol=1e-6, atol=1e-6)
    # generators continue from initialisation to sampling, run by run
    stacked_samples = sample_responses(stacked_logits, 10, stack_generators)
    for r, policy in enumerate(alone):
        assert torch.equal(stacked_samples[r], sample_responses(policy(prompts), 10, alone_generators[r]))
    copy = stack.unstack(1)
    assert torch.equal(copy.encode, stack.encode[1])
    with torch.no_grad():
        copy.encode.add_(1.0)
    assert torch.equal(stack.encode[1], alone[1].encode)  # unstack is a copy


def test_sample_responses_needs_one_generator_per_run():
    with pytest.raises(ValueError, match="got 2 generators for 3 runs"):
        sample_responses(torch.zeros(3, 1, 2, 4), 2, [seeded(0), seeded(1)])


def test_run_adam_equals_torch_adam_for_one_run():
    """lab.training.optim: RunAdam with one run takes torch.optim.Adam's steps (float tolerance), over 30 steps."""
    policy = Policy(5, 3, 3, 6, generator=seeded(2))
    reference = Policy(5, 3, 3, 6, generator=seeded(2))
    params = [p.detach().unsqueeze(0).clone().requires_grad_(True) for p in policy.parameters()]  # float[1 ...]
    ours = RunAdam(params, torch.tensor([3e-2]), betas=(0.8, 0.99), eps=1e-6)
    theirs = torch.optim.Adam(reference.parameters(), lr=3e-2, betas=(0.8, 0.99), eps=1e-6)
    g = seeded(9)
    for _ in range(30):
        grads = [torch.randn(p.shape, generator=g) for p in reference.parameters()]
        ours.zero_grad()
        theirs.zero_grad()
        for mine, other, grad in zip(params, reference.parameters(), grads):
            mine.grad = grad.unsqueeze(0).clone()
            other.grad = grad.clone()
        ours.step()
        theirs.step()
    for mine, other in zip(params, reference.parameters()):
        torch.testing.assert_close(mine[0].detach(), other.detach(), rtol=1e-5, atol=1e-6)
    assert not torch.equal(params[0][0], policy.embedding)  # it moved


def test_run_adam_applies_each_runs_learning_rate():
    """lab.training.optim: lr float[run]; run r moves exactly like torch.optim.Adam with lr[r], untouched by the others."""
    lrs = [1e-3, 1e-2, 1e-1]
    g = seeded(10)
    start = torch.randn(3, 4, 5, generator=g)
    param = start.clone().requires_grad_(True)
    ours = RunAdam([param], torch.tensor(lrs))
    singles = [start[r].clone().requires_grad_(True) for r in range(3)]
    theirs = [torch.optim.Adam([p], lr=lr) for p, lr in zip(singles, lrs)]
    for _ in range(20):
        grad = torch.randn(3, 4, 5, generator=g)
        param.grad = grad.clone()
        ours.step()
        for r in range(3):
            singles[r].grad = grad[r].clone()
            theirs[r].step()
    for r in range(3):
        torch.testing.assert_close(param[r].detach(), singles[r].detach(), rtol=1e-5, atol=1e-6)
    moved = (param.detach() - start).abs().mean(dim=(1, 2))
    assert moved[0] < moved[1] < moved[2]
    ours.zero_grad()
    assert param.grad is None


def test_save_and_load_policy_round_trip(tmp_path):
    """policy.pt holds the parameters; load_policy rebuilds the same policy."""
    policy = Policy(7, 4, 4, dim=3, generator=seeded(12))
    save_policy(policy, tmp_path / "policy.pt")
    loaded = load_policy(tmp_path / "policy.pt")
    assert (loaded.vocab_size, loaded.prompt_length, loaded.response_length, loaded.dim) == (7, 4, 4, 3)
    for name, p in policy.named_parameters():
        assert torch.equal(getattr(loaded, name), p)
    prompts = torch.tensor([[6, 0, 1, 2]])
    assert torch.equal(loaded(prompts), policy(prompts))
    stacked = {name: torch.stack([p, p + 1]) for name, p in policy.named_parameters()}
    assert torch.equal(policy_from_state(stacked, 1).decode, policy.decode + 1)
