"""Exact state values, action values and GAE advantages (lab/exact/values.py, lab/exact/critic_error.py), each against an independent enumeration written here: every response y with its
probability pi(y | x) (`lab.exact.varlen`), grouped in plain Python by the prefix it passes through.

    V^pi(x, u)           = sum_{y through u} pi(y) R(y) / sum_{y through u} pi(y)
    Q^pi(x, u, w)        = the same over the responses through u then w
    E[A_t | u, w]        = sum_{y through u w} pi(y) A_t(y) / sum_{y through u w} pi(y),  A_t(y) from a plain loop
"""

from collections import defaultdict

import torch
from hypothesis import given
from hypothesis import strategies as st

import lab.policies as P
from lab.exact import critic_error, values, varlen
from lab.exact.enumeration import flat_grad
from lab.policies.autoregressive import AutoregressivePolicy
from lab.policies.critic import Critic
from lab.policies.factorized import Policy

TOLERANCE = dict(rtol=1e-9, atol=1e-11)
FLOAT32 = dict(rtol=1e-6, atol=1e-5)
"""Two float32 paths to the same numbers (batched and alone, a table and a direct pass) sum in different
orders, and the CPU's kernels (AVX2, AVX-512) round them differently: 1e-7 relative seen, allowed 1e-6."""


def seeded(seed):
    return torch.Generator().manual_seed(seed)


def toy(seed, vocab, cap):
    """An autoregressive float64 policy, two prompts, a random reward table and a random critic table."""
    policy = AutoregressivePolicy(vocab, 2, cap, 3, generator=seeded(seed)).double()
    prompts = torch.randint(vocab, (2, 2), generator=seeded(seed + 1))
    rewards = torch.rand(2, varlen.space_size(vocab, cap), generator=seeded(seed + 2), dtype=torch.float64) * 4
    critic = [torch.randn(2, vocab ** q, generator=seeded(seed + 3 + q), dtype=torch.float64) for q in range(cap)]
    return policy, prompts, rewards, critic


def responses_of(policy):
    """Every response as (tokens, live length): a tuple of its live tokens, EOS included."""
    rows = varlen.varlen_responses(policy.vocab_size, policy.response_length)
    lengths = varlen.live_mask(policy, rows).sum(-1)
    return [tuple(r[:n]) for r, n in zip(rows.tolist(), lengths.tolist())]


def plain_gae(tokens, reward, critic_of, lam):
    """A_t of one response by the definition: delta_t = r_t + V(s_{t+1}) - V(s_t), A_t = sum_l lam^l delta_{t+l}."""
    length = len(tokens)
    value = [critic_of(tokens[:t]) for t in range(length)] + [0.0]
    deltas = [(reward if t == length - 1 else 0.0) + value[t + 1] - value[t] for t in range(length)]
    return [sum(lam ** l * deltas[t + l] for l in range(length - t)) for t in range(length)]


def grouped(policy, prompts, rewards, per_token):
    """sum pi(y) f and sum pi(y) over the responses through each (prompt, t, prefix) and (prompt, t, prefix, w)."""
    probs = varlen.all_probs(policy, prompts).detach()
    states, actions = defaultdict(lambda: [0.0, 0.0]), defaultdict(lambda: [0.0, 0.0])
    for b in range(len(prompts)):
        for i, tokens in enumerate(responses_of(policy)):
            p, r = float(probs[b, i]), float(rewards[b, i])
            for t, f in enumerate(per_token(b, tokens, r)):
                for table, key in ((states, (b, tokens[:t])), (actions, (b, tokens[:t], tokens[t]))):
                    table[key][0] += p * f
                    table[key][1] += p
    return states, actions


def index_of(prefix, vocab):
    index = 0
    for token in prefix:
        index = index * vocab + token
    return index


@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(1, 3), cap=st.integers(1, 3))
def test_state_and_action_values_are_the_conditional_expectations_of_the_reward(seed, vocab, cap):
    policy, prompts, rewards, _ = toy(seed, vocab, cap)
    states, actions = grouped(policy, prompts, rewards, lambda b, tokens, r: [r] * len(tokens))
    v, q, visits = (values.state_values(policy, prompts, rewards), values.action_values(policy, prompts, rewards),
                    values.visit_probs(policy, prompts))
    for (b, prefix), (total, mass) in states.items():
        level, row = len(prefix), index_of(prefix, vocab)
        assert abs(float(v[level][b, row]) - total / mass) < 1e-9
        assert abs(float(visits[level][b, row]) - mass) < 1e-12
    for (b, prefix, w), (total, mass) in actions.items():
        assert abs(float(q[len(prefix)][b, index_of(prefix, vocab), w]) - total / mass) < 1e-9
    assert len(states) == 2 * sum(vocab ** t for t in range(cap))  # every state is reached


@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(1, 3), cap=st.integers(1, 3),
       lam=st.sampled_from([0.0, 0.5, 0.95, 1.0]))
def test_expected_gae_advantage_of_any_critic_matches_the_enumerated_average(seed, vocab, cap, lam):
    policy, prompts, rewards, critic = toy(seed, vocab, cap)

    def per_token(b, tokens, r):
        return plain_gae(tokens, r, lambda prefix: float(critic[len(prefix)][b, index_of(prefix, vocab)]), lam)

    _, actions = grouped(policy, prompts, rewards, per_token)
    got = values.gae_advantages_exact(policy, prompts, rewards, critic, lam)
    for (b, prefix, w), (total, mass) in actions.items():
        assert abs(float(got[len(prefix)][b, index_of(prefix, vocab), w]) - total / mass) < 1e-9


def test_with_the_critic_at_v_pi_the_lab_gae_on_responses_matches_the_enumeration():
    """The issue's check: a critic fixed at V^pi, the lab's GAE (lab.core.gae) on every response, averaged
    over the responses through each (state, action), against `gae_advantages_exact` and Q^pi - V^pi."""
    from lab.core.gae import gae_advantages, terminal_rewards

    policy, prompts, rewards, _ = toy(4, 2, 3)
    truth = values.state_values(policy, prompts, rewards)
    rows = varlen.varlen_responses(2, 3)
    mask = varlen.live_mask(policy, rows).expand(2, *rows.shape)
    on = values.on_responses(policy, truth, rows)  # float[batch n pos]
    advantages, _ = gae_advantages(terminal_rewards(rewards, mask), on, mask, 0.7)
    lab_advantage = {}
    for b in range(2):
        for i, tokens in enumerate(responses_of(policy)):
            for t in range(len(tokens)):
                lab_advantage[(b, tokens[:t], tokens[t], i)] = float(advantages[b, i, t])
    _, actions = grouped(policy, prompts, rewards, lambda b, tokens, r: [
        lab_advantage[(b, tokens[:t], tokens[t], responses_of(policy).index(tokens))] for t in range(len(tokens))])
    exact = values.gae_advantages_exact(policy, prompts, rewards, truth, 0.7)
    q = values.action_values(policy, prompts, rewards)
    for (b, prefix, w), (total, mass) in actions.items():
        level, row = len(prefix), index_of(prefix, 2)
        assert abs(float(exact[level][b, row, w]) - total / mass) < 1e-9
        assert abs(total / mass - float(q[level][b, row, w] - truth[level][b, row])) < 1e-9


def test_expected_gae_gradient_is_the_enumerated_average_of_the_per_response_estimator():
    policy, prompts, rewards, critic = toy(9, 2, 3)
    rows = varlen.varlen_responses(2, 3)
    probs = varlen.all_probs(policy, prompts).detach()
    for lam in (0.0, 0.6, 1.0):
        got = critic_error.expected_gae_gradient(policy, prompts, rewards, critic, lam)
        for b in range(2):
            surrogate = 0.0
            log_probs = P.token_log_probs(policy, prompts[b:b + 1], rows.unsqueeze(0))[0]  # float[n pos]
            for i, tokens in enumerate(responses_of(policy)):
                advantage = plain_gae(tokens, float(rewards[b, i]),
                                      lambda prefix: float(critic[len(prefix)][b, index_of(prefix, 2)]), lam)
                advantage = torch.tensor(advantage, dtype=torch.float64)
                surrogate = surrogate + probs[b, i] * (advantage * log_probs[i, :len(tokens)]).sum()
            torch.testing.assert_close(got[b], flat_grad(surrogate, policy), **TOLERANCE)


def test_value_error_is_the_visit_weighted_squared_error():
    policy, prompts, rewards, critic = toy(2, 2, 3)
    truth = values.state_values(policy, prompts, rewards)
    error = critic_error.value_error_exact(policy, prompts, rewards, critic)
    square = lambda b, tokens, r: [  # noqa: E731
        float(critic[t][b, index_of(tokens[:t], 2)] - truth[t][b, index_of(tokens[:t], 2)]) ** 2
        for t in range(len(tokens))]
    states, _ = grouped(policy, prompts, rewards, square)
    by_position = [[0.0, 0.0] for _ in range(3)]
    for (b, prefix), (total, mass) in states.items():
        by_position[len(prefix)][0] += total
        by_position[len(prefix)][1] += mass
    want = [e / m for e, m in by_position]
    torch.testing.assert_close(error.by_position, torch.tensor(want, dtype=torch.float64), **TOLERANCE)
    total = sum(e for e, _ in by_position) / sum(m for _, m in by_position)
    assert abs(float(error.total) - total) < 1e-12
    assert float(critic_error.value_error_exact(policy, prompts, rewards, truth).total) == 0.0


def test_the_critic_read_at_every_state_is_the_critic_on_the_responses():
    policy, prompts, _, _ = toy(6, 3, 3)
    critic = Critic("autoregressive", 3, 2, 3, 3, [seeded(1), seeded(2)])
    with torch.no_grad():
        for p in critic.parameters():
            p.normal_(generator=seeded(3))
        tables = critic_error.critic_state_values(critic, policy, prompts)  # float[run batch V^q]
        rows = varlen.varlen_responses(3, 3)
        direct = critic(prompts, rows.expand(2, *rows.shape))  # float[run batch n pos]
    mask = varlen.live_mask(policy, rows)
    torch.testing.assert_close(values.on_responses(policy, tables, rows), direct * mask, **FLOAT32)


def test_factorized_policy_has_one_state_the_prompt():
    policy = Policy(3, 2, 2, 3, generator=seeded(0)).double()
    prompts = torch.tensor([[0, 1], [2, 2]])
    rewards = torch.rand(2, 9, generator=seeded(1), dtype=torch.float64)
    v = values.state_values(policy, prompts, rewards)
    torch.testing.assert_close(v, varlen.expected_reward(policy, prompts, rewards).detach())
    critic = torch.tensor([0.3, -1.0], dtype=torch.float64)
    for lam in (0.0, 1.0):  # one step per response: lambda changes nothing
        torch.testing.assert_close(values.gae_advantages_exact(policy, prompts, rewards, critic, lam),
                                   rewards - critic.unsqueeze(-1))
    error = critic_error.value_error_exact(policy, prompts, rewards, critic)
    torch.testing.assert_close(error.total, ((critic - v) ** 2).mean())
    grad_j = torch.stack([flat_grad(varlen.expected_reward(policy, prompts[b:b + 1], rewards[b:b + 1]).sum(), policy)
                          for b in range(2)])
    torch.testing.assert_close(critic_error.expected_gae_gradient(policy, prompts, rewards, critic, 0.3), grad_j,
                               **TOLERANCE)


def test_a_run_stack_and_its_critics_give_each_run_its_own_numbers():
    """The loop's per-epoch metric: R policies and R critics at once, each run as if alone."""
    from lab.policies import make_stack

    prompts = torch.tensor([[0, 1, 2], [2, 2, 1]])
    for kind in ("factorized", "autoregressive"):
        stack = make_stack(kind, 3, 3, 3, 4, [seeded(r) for r in range(3)])
        critic = Critic(kind, 3, 3, 3, 4, [seeded(10 + r) for r in range(3)])
        with torch.no_grad():
            for p in critic.parameters():
                p.normal_(generator=seeded(20))
            tables = critic_error.critic_state_values(critic, stack, prompts)
        error = critic_error.value_error_exact(stack, prompts, "inclusion-ordering", tables)
        for run in range(3):
            own = [t[run] for t in tables] if isinstance(tables, list) else tables[run]
            alone = critic_error.value_error_exact(stack.unstack(run), prompts, "inclusion-ordering", own)
            torch.testing.assert_close(error.by_position[run], alone.by_position, **FLOAT32)
            assert abs(float(error.total[run] - alone.total)) < 1e-6 * abs(float(alone.total)) + 1e-9
