"""The critic network of the policy's family (lab/policies/critic.py).

Checked against the equations written out here with plain loops over positions:
    factorised       v(x)      = (sum_p E[x_p] A_p) . w + b                      at every position
    autoregressive   v(x, y_<q) = (h B_q + sum_{j<q} E[y_j] C_qj) . w + b
"""

import pytest
import torch

from lab.policies.critic import CRITICS, Critic, parameter_count
from lab.policies.interface import PolicyKind

KINDS = [k.value for k in PolicyKind]
VOCAB, PROMPT, CAP, DIM = 3, 2, 3, 4


def seeded(seed):
    return torch.Generator().manual_seed(seed)


def random_critic(kind, runs=2, seed=0):
    """A critic with every parameter redrawn (the readout starts at 0, which would hide the formula)."""
    critic = Critic(kind, VOCAB, PROMPT, CAP, DIM, [seeded(seed + r) for r in range(runs)]).double()
    with torch.no_grad():
        for name, p in critic.named_parameters():
            p.copy_(torch.randn(p.shape, generator=seeded(seed + 100), dtype=p.dtype))
        if kind == "autoregressive":  # C_qj, j >= q, stays 0 as initialised
            critic.previous.mul_(torch.ones(CAP, CAP).tril(-1)[..., None, None])
    return critic


def batch(seed=1):
    g = seeded(seed)
    prompts = torch.randint(VOCAB, (2, PROMPT), generator=g)
    responses = torch.randint(VOCAB + 1, (2, 3, CAP), generator=g)  # EOS = VOCAB allowed anywhere
    return prompts, responses


def formula(params, prompts, responses, kind):
    """The value before every position, one run, by loops: float[batch trial pos]."""
    out = torch.zeros(*responses.shape, dtype=torch.float64)
    for b in range(len(prompts)):
        h = sum(params["embedding"][x] @ params["encode"][p] for p, x in enumerate(prompts[b].tolist()))
        for t in range(responses.shape[1]):
            for q in range(CAP):
                earlier = enumerate(responses[b, t, :q].tolist())
                z = h if kind == "factorized" else h @ params["decode"][q] + sum(
                    (params["embedding"][y] @ params["previous"][q, j] for j, y in earlier),
                    torch.zeros(DIM, dtype=torch.float64))
                out[b, t, q] = z @ params["readout"] + params["bias"]
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_values_follow_the_equations_run_by_run(kind):
    critic = random_critic(kind)
    prompts, responses = batch()
    got = critic(prompts, responses)  # float[run batch trial pos]
    assert got.shape == (2, *responses.shape)
    for run in range(2):
        params = {name: p[run].detach() for name, p in critic.named_parameters()}
        torch.testing.assert_close(got[run].detach(), formula(params, prompts, responses, kind), rtol=1e-10, atol=1e-10)
    per_run_prompts = torch.stack([prompts, prompts.flip(0)])  # int[run batch pos]: each run its own
    torch.testing.assert_close(critic(per_run_prompts, responses.expand(2, *responses.shape))[1],
                               critic(prompts.flip(0), responses)[1])


@pytest.mark.parametrize("kind", KINDS)
def test_run_r_is_the_critic_drawn_alone_from_generator_r_and_starts_at_zero(kind):
    together = Critic(kind, VOCAB, PROMPT, CAP, DIM, [seeded(5), seeded(6)])
    alone = Critic(kind, VOCAB, PROMPT, CAP, DIM, [seeded(6)])
    for (name, p), (_, q) in zip(together.named_parameters(), alone.named_parameters()):
        assert torch.equal(p[1], q[0]), name
    assert not torch.equal(together.embedding[0], together.embedding[1])
    prompts, responses = batch()
    assert bool((together(prompts, responses) == 0).all())  # w = 0, b = 0: V = 0 everywhere


def test_factorized_value_is_the_prompts_alone_and_autoregressive_sees_only_earlier_tokens():
    prompts, responses = batch()
    flat = random_critic("factorized")(prompts, responses)
    assert bool((flat == flat[..., :1, :1]).all())  # the same at every trial and position
    ar = random_critic("autoregressive")
    before = ar(prompts, responses)
    changed = responses.clone()
    changed[..., 1] = (changed[..., 1] + 1) % (VOCAB + 1)  # another token at position 1
    after = ar(prompts, changed)
    assert torch.equal(before[..., :2], after[..., :2])  # positions 0 and 1 do not see it
    assert bool(((before[..., 2] - after[..., 2]).abs() > 1e-6).all())  # position 2 does


def test_the_previous_token_matrices_above_the_diagonal_get_no_gradient():
    critic = random_critic("autoregressive")
    prompts, responses = batch()
    critic(prompts, responses).sum().backward()
    free = torch.ones(CAP, CAP).tril(-1).bool()
    assert bool((critic.previous.grad[:, ~free] == 0).all())
    assert bool((critic.previous.grad[:, free] != 0).any())


def test_parameter_count_counts_the_free_entries_of_one_run():
    d = DIM
    flat = Critic("factorized", VOCAB, PROMPT, CAP, d, [seeded(0), seeded(1)])
    assert flat.parameter_count == VOCAB * d + PROMPT * d * d + d + 1
    ar = Critic("autoregressive", VOCAB, PROMPT, CAP, d, [seeded(0)])
    assert ar.parameter_count == (VOCAB + 1) * d + PROMPT * d * d + CAP * d * d + CAP * (CAP - 1) // 2 * d * d + d + 1
    single = CRITICS[PolicyKind.autoregressive].init(VOCAB, PROMPT, CAP, d, seeded(0))
    assert parameter_count(single) == ar.parameter_count
