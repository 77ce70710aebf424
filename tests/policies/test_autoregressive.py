"""The autoregressive policy with EOS and the policy interface (lab/policies/).

    z_q = h B_q + sum_{j<q} E[y_j] C_qj,   logits_q = z_q E^T over V + 1 tokens (EOS = V)
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import lab
import lab.policies as P
from lab.exact import enumeration as exact, varlen as exact_varlen
from lab.core.kl import k1, k2, k3
from lab.policies.autoregressive import AutoregressivePolicy, AutoregressiveStack
from lab.policies.factorized import Policy
from lab.policies.sampling import response_log_probs, sample_responses

Z_LIMIT = 5.0
"""Monte Carlo checks fail beyond 5 standard errors (false alarm ~5.7e-7 per check; fixed seeds)."""


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def loop_logits(policy: AutoregressivePolicy, prompt: list[int], response: list[int]) -> torch.Tensor:
    """The definition as loops: float[pos vocab+1] for one prompt and one response."""
    E, A, B, C = (p.detach() for p in (policy.embedding, policy.encode, policy.decode, policy.previous))
    h = sum(E[token] @ A[p] for p, token in enumerate(prompt))
    rows = []
    for q in range(policy.max_length):
        z = h @ B[q]
        for j in range(q):  # only tokens already emitted
            z = z + E[response[j]] @ C[q, j]
        rows.append(torch.stack([z @ E[v] for v in range(policy.vocab_size + 1)]))  # tied output
    return torch.stack(rows)


@given(seed=st.integers(0, 2**31), vocab=st.integers(1, 4), prompt_length=st.integers(1, 3),
       max_length=st.integers(1, 4), dim=st.integers(1, 4))
def test_teacher_forced_logits_match_a_loop_over_the_definition(seed, vocab, prompt_length, max_length, dim):
    policy = AutoregressivePolicy(vocab, prompt_length, max_length, dim, generator=seeded(seed))
    prompts = torch.randint(vocab, (2, prompt_length), generator=seeded(seed + 1))
    responses = torch.randint(vocab + 1, (2, 3, max_length), generator=seeded(seed + 2))
    got = policy(prompts, responses).detach()
    for b in range(2):
        for t in range(3):
            torch.testing.assert_close(got[b, t], loop_logits(policy, prompts[b].tolist(), responses[b, t].tolist()),
                                       rtol=1e-5, atol=1e-5)


def test_shapes_and_the_unused_previous_token_weights_stay_zero():
    policy = AutoregressivePolicy(5, 3, 4, dim=6, generator=seeded(0))
    shapes = {name: tuple(p.shape) for name, p in policy.named_parameters()}
    assert shapes == {"embedding": (6, 6), "encode": (3, 6, 6), "decode": (4, 6, 6), "previous": (4, 4, 6, 6)}
    assert policy.eos == 5 and policy.max_length == 4
    future = torch.ones(4, 4).triu()[..., None, None].bool().expand_as(policy.previous)  # j >= q
    assert bool((policy.previous[future] == 0).all())
    prompts, responses = torch.tensor([[0, 1, 2]]), torch.randint(6, (1, 2, 4), generator=seeded(1))
    P.sequence_log_probs(policy, prompts, responses).sum().backward()
    assert bool((policy.previous.grad[future] == 0).all())  # so Adam keeps them at zero


@given(seed=st.integers(0, 2**31), vocab=st.integers(1, 3), max_length=st.integers(1, 3))
def test_with_zero_previous_weights_and_no_eos_it_is_the_lecture_model(seed, vocab, max_length):
    """The same generator gives the lecture model's parameters in the first V rows; with C = 0 the
    logits of the V content tokens are the lecture model's, and conditioned on never choosing EOS
    (the truncated responses) the response distribution is exactly the lecture model's."""
    lecture = Policy(vocab, 2, max_length, 3, generator=seeded(seed)).double()
    policy = AutoregressivePolicy(vocab, 2, max_length, 3, generator=seeded(seed)).double()
    with torch.no_grad():
        policy.previous.zero_()
    torch.testing.assert_close(policy.embedding[:vocab], lecture.embedding, rtol=0, atol=0)
    prompts = torch.randint(vocab, (2, 2), generator=seeded(seed + 1))
    responses = torch.randint(vocab + 1, (2, 3, max_length), generator=seeded(seed + 2))
    logits = policy(prompts, responses)[..., :vocab]
    torch.testing.assert_close(logits, lecture(prompts).unsqueeze(1).expand_as(logits), rtol=1e-12, atol=1e-12)
    probs = exact_varlen.all_probs(policy, prompts).detach()
    truncated = probs[:, -vocab ** max_length:]  # the responses without EOS, in lab.exact's order
    torch.testing.assert_close(truncated / truncated.sum(-1, keepdim=True),
                               exact.all_probs(lecture, prompts).detach(), rtol=1e-10, atol=1e-12)


def test_a_stack_is_its_runs_alone_and_samples_as_they_do():
    """Run r of a stack starts from generator r's policy and draws the same responses alone or batched."""
    prompts = torch.tensor([[0, 2], [1, 1]])
    stack = AutoregressiveStack(3, 2, 4, 5, [seeded(0), seeded(1)])
    for r in range(2):
        alone = AutoregressivePolicy(3, 2, 4, 5, generator=seeded(r))
        for name, p in alone.named_parameters():
            assert torch.equal(getattr(stack, name)[r], p)
            assert torch.equal(getattr(stack.unstack(r), name), p)
    batched = P.sample(stack, prompts, 6, [seeded(10), seeded(11)])
    for r in range(2):
        alone = P.sample(stack.unstack(r), prompts, 6, seeded(10 + r))
        assert torch.equal(batched[r], alone)
        torch.testing.assert_close(P.token_log_probs(stack, prompts, batched)[r],
                                   P.token_log_probs(stack.unstack(r), prompts, alone), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(P.greedy(stack, prompts)[1], P.greedy(stack.unstack(1), prompts))


def test_sampled_responses_follow_the_exact_distribution_and_are_padded_with_eos():
    policy = AutoregressivePolicy(2, 2, 3, 3, generator=seeded(3)).double()
    prompts = torch.tensor([[0, 1]])
    draws = P.sample(policy, prompts, 20_000, seeded(4))[0]  # int[trial pos]
    eos = policy.eos
    after = torch.cumsum((draws == eos).long(), dim=-1) - (draws == eos).long() > 0
    assert bool((draws[after] == eos).all())  # padding after the first EOS is EOS
    responses = exact_varlen.varlen_responses(2, 3)
    probs = exact_varlen.all_probs(policy, prompts)[0].detach()
    counts = (draws.unsqueeze(1) == responses.unsqueeze(0)).all(-1).sum(0).double()
    expected = len(draws) * probs
    z = (counts - expected) / (expected * (1 - probs)).sqrt()
    assert float(z.abs().max()) < Z_LIMIT
    # the log-prob of a sampled response is the exact one of that response
    index = (draws.unsqueeze(1) == responses.unsqueeze(0)).all(-1).double().argmax(-1)
    torch.testing.assert_close(P.sequence_log_probs(policy, prompts, draws.unsqueeze(0))[0].detach(),
                               exact_varlen.all_log_probs(policy, prompts)[0, index].detach())


def test_greedy_takes_each_positions_argmax_given_its_own_prefix():
    policy = AutoregressivePolicy(4, 3, 5, 4, generator=seeded(7))
    with torch.no_grad():
        policy.embedding[-1].mul_(0.1)  # EOS less likely, so some greedy responses run long
    prompts = torch.randint(4, (6, 3), generator=seeded(8))
    best = P.greedy(policy, prompts)  # int[batch pos]
    logits = P.token_logits(policy, prompts, best.unsqueeze(-2)).squeeze(-3)
    mask = P.response_mask(policy, best)
    assert torch.equal(best[mask], logits.argmax(-1)[mask])
    assert bool((best[~mask] == policy.eos).all())


def test_entropy_and_kl_estimators_are_zero_on_padding():
    policy = AutoregressivePolicy(3, 2, 4, 3, generator=seeded(2))
    reference = AutoregressivePolicy(3, 2, 4, 3, generator=seeded(3))
    prompts = torch.tensor([[0, 2]])
    responses = torch.tensor([[[0, 3, 3, 3], [1, 2, 0, 3], [0, 1, 2, 1]]])
    mask = P.response_mask(policy, responses)
    assert mask.tolist() == [[[True, True, False, False], [True] * 4, [True] * 4]]
    assert P.response_lengths(policy, responses).tolist() == [[2, 4, 4]]
    log_softmax = torch.log_softmax(P.token_logits(policy, prompts, responses), -1)
    hand = -(log_softmax.exp() * log_softmax).sum(-1) * mask
    torch.testing.assert_close(P.token_entropy(policy, prompts, responses), hand)
    lp, ref = P.token_log_probs(policy, prompts, responses), P.token_log_probs(reference, prompts, responses)
    for k in (k1, k2, k3):
        values = k(lp, ref)
        assert bool((values[~mask] == 0).all()) and bool((values[mask] != 0).all())


def test_the_factorized_policy_behind_the_interface_is_the_lecture_path():
    """lab.Policy, lab.PolicyStack and lab.policies.factorized are unchanged; the interface reproduces lab.policies.sampling."""
    from lab.policies import factorized

    assert factorized.Policy is lab.Policy is Policy and factorized.PolicyStack is lab.PolicyStack
    assert P.POLICIES[P.PolicyKind.factorized].classes == (lab.Policy, lab.PolicyStack)
    stack = lab.PolicyStack(5, 3, 3, 10, [seeded(0), seeded(1)])
    prompts = torch.tensor([[1, 0, 2], [3, 2, 4]])
    gens = [seeded(5), seeded(6)]
    responses = P.sample(stack, prompts, 4, gens)
    assert torch.equal(responses, sample_responses(stack(prompts), 4, [seeded(5), seeded(6)]))
    assert torch.equal(P.token_log_probs(stack, prompts, responses), response_log_probs(stack(prompts), responses))
    assert torch.equal(P.greedy(stack, prompts), stack(prompts).argmax(-1))
    assert bool(P.response_mask(stack, responses).all())


def test_an_unknown_policy_kind_lists_the_choices():
    with pytest.raises(ValueError, match="choose one of: factorized, autoregressive"):
        P.make_policy("transformer", 5, 3, 3)


def test_init_scale_multiplies_the_whole_embedding_and_nothing_else():
    """TrainConfig.init_scale applies to the autoregressive policy as to the lecture's: the same draws,
    the embedding (EOS row included) scaled; a run's stack row is the single policy."""
    one = AutoregressivePolicy(5, 3, 5, 10, generator=torch.Generator().manual_seed(4))
    small = AutoregressivePolicy(5, 3, 5, 10, generator=torch.Generator().manual_seed(4), init_scale=0.1)
    torch.testing.assert_close(small.embedding, one.embedding * 0.1)
    for name in ("encode", "decode", "previous"):
        assert torch.equal(getattr(small, name), getattr(one, name)), name
    stack = AutoregressiveStack(5, 3, 5, 10, [torch.Generator().manual_seed(s) for s in (3, 4)], [1.0, 0.1])
    assert torch.equal(stack.embedding[1], small.embedding) and torch.equal(stack.previous[1], small.previous)


def test_training_honours_init_scale_and_refuses_an_entropy_bonus():
    from lab.training.config import ConfigError, TrainConfig
    from lab.training.train import train
    from tasks.sorting import make_task

    config = TrainConfig(epochs=1, steps=1, policy="autoregressive", init_scale=0.1, lr=1e-9)
    state = train(make_task(), config).state
    start = AutoregressivePolicy(5, 3, 5, 10, generator=torch.Generator().manual_seed(config.seed), init_scale=0.1)
    torch.testing.assert_close(state["embedding"][0], start.embedding.detach(), rtol=0, atol=1e-6)
    with pytest.raises(ConfigError, match="entropy-coef"):
        TrainConfig(policy="autoregressive", entropy_coef=0.01)
