"""lab.exact.optimum and lab.exact.pairs against an independent enumeration in plain Python.

The reference side lists every response with itertools (the autoregressive one: every content
shorter than the cap followed by EOS, and every truncated content), takes each position's
probabilities from the policy's logits one response at a time, and sums with math.exp / math.log
over Python floats; the rewards are the task's plain-Python definitions.
"""

import itertools
import math

import pytest
import torch

from lab.exact import optimum as O
from lab.exact.pairs import population_dpo_loss
from lab.policies.autoregressive import AutoregressivePolicy
from lab.policies.factorized import Policy
from tasks.sorting import distance_reference, distance_varlen_reference

PROMPTS = torch.tensor([[2, 0], [1, 1]])
VOCAB, LENGTH = 3, 2


def softmax(logits):
    top = max(logits)
    weights = [math.exp(v - top) for v in logits]
    return [w / sum(weights) for w in weights]


def factorised(seed):
    return Policy(VOCAB, 2, LENGTH, dim=4, generator=torch.Generator().manual_seed(seed)).double()


def autoregressive(seed):
    return AutoregressivePolicy(VOCAB, 2, LENGTH, dim=4, generator=torch.Generator().manual_seed(seed)).double()


def plain_table(policy, prompt_row):
    """{response tuple: (probability, reward)} for one prompt, by itertools and floats."""
    prompt = PROMPTS[prompt_row].tolist()
    table = {}
    if isinstance(policy, AutoregressivePolicy):
        eos = policy.eos
        contents = [c for k in range(LENGTH + 1) for c in itertools.product(range(VOCAB), repeat=k)]
        for content in contents:
            response = list(content) + [eos] * (LENGTH - len(content))
            logits = policy(PROMPTS[prompt_row:prompt_row + 1], torch.tensor([[response]]))[0, 0].tolist()
            live = min(len(content) + 1, LENGTH)  # the EOS is live; padding after it is not
            probability = math.prod(softmax(logits[q])[response[q]] for q in range(live))
            table[tuple(response)] = (probability, distance_varlen_reference(prompt, response, eos))
        return table
    positions = [softmax(row) for row in policy(PROMPTS[prompt_row:prompt_row + 1])[0].tolist()]
    for response in itertools.product(range(VOCAB), repeat=LENGTH):
        probability = math.prod(positions[q][v] for q, v in enumerate(response))
        table[response] = (probability, distance_reference(prompt, list(response)))
    return table


def plain_optimum(table, beta):
    z = sum(p * math.exp(r / beta) for p, r in table.values())
    return {y: p * math.exp(r / beta) / z for y, (p, r) in table.items()}, z


def responses_of(policy):
    from lab.exact.varlen import enumerate_responses

    return [tuple(y) for y in enumerate_responses(policy).tolist()]


@pytest.mark.parametrize("make", [factorised, autoregressive])
@pytest.mark.parametrize("beta", [0.1, 1.0, 7.0])
def test_optimum_partition_and_objective_match_the_plain_enumeration(make, beta):
    reference, policy = make(0), make(1)
    optimum = O.policy_optimum(reference, PROMPTS, "distance", beta)
    objective = O.policy_objective(policy, reference, PROMPTS, "distance", beta).detach()
    ref_log_probs, rewards = O.policy_tables(reference, PROMPTS, "distance")
    log_z = O.log_partition(ref_log_probs.exp(), rewards, beta)
    for row in range(len(PROMPTS)):
        ref_table, table = plain_table(reference, row), plain_table(policy, row)
        star, z = plain_optimum(ref_table, beta)
        order = responses_of(reference)
        assert set(order) == set(star)
        assert optimum[row].tolist() == pytest.approx([star[y] for y in order], rel=1e-9, abs=1e-15)
        assert float(log_z[row]) == pytest.approx(math.log(z), rel=1e-9)
        j = sum(p * (r - beta * math.log(p / ref_table[y][0])) for y, (p, r) in table.items())
        assert float(objective[row]) == pytest.approx(j, rel=1e-9, abs=1e-12)
        kl = sum(p * math.log(p / star[y]) for y, (p, _) in table.items())
        assert float(O.kl_to_optimum(policy, reference, PROMPTS, "distance", beta)[row]) == pytest.approx(
            kl, rel=1e-8, abs=1e-12)


def test_table_functions_handle_zero_probabilities():
    """0 log 0 = 0 in the KL; a response pi_ref never emits gets no mass in pi*."""
    ref = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    rewards = torch.tensor([[1.0, 0.0, 5.0]], dtype=torch.float64)
    star = O.kl_regularized_optimum(ref, rewards, 0.5)
    e2 = math.exp(2.0)
    assert star[0].tolist() == pytest.approx([e2 / (e2 + 1), 1 / (e2 + 1), 0.0], rel=1e-12)
    probs = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    assert float(O.kl_divergence(probs, ref)) == pytest.approx(math.log(2.0), rel=1e-12)
    assert float(O.kl_regularized_objective(probs, ref, rewards, 0.5)) == pytest.approx(1 - 0.5 * math.log(2.0))
    assert float(O.kl_divergence(ref, probs)) == math.inf
    with pytest.raises(ValueError, match="beta > 0"):
        O.kl_regularized_optimum(ref, rewards, 0.0)


def test_best_in_class_reaches_pi_star_when_the_class_contains_it():
    """One prompt, dim >= V, a reward that adds over positions: pi* factorises and the factorised
    class can express it, so the ascent ends at J_beta(pi*) = beta log Z and KL(pi || pi*) ~ 0."""
    policy, prompts, beta = factorised(3), PROMPTS[:1], 0.5
    result = O.best_in_class(policy, prompts, "distance", beta)
    ref_log_probs, rewards = O.policy_tables(policy, prompts, "distance")
    best = beta * O.log_partition(ref_log_probs.exp(), rewards, beta)
    assert result.converged and result.iterations > 0
    assert float(result.objective) == pytest.approx(float(best), rel=1e-6)
    assert float(O.kl_to_optimum(result.policy, policy, prompts, "distance", beta)) < 1e-5
    assert policy.embedding.dtype == torch.float64 and not torch.equal(policy.embedding, result.policy.embedding)


@pytest.mark.parametrize("make", [factorised, autoregressive])
def test_best_in_class_is_between_the_start_and_the_optimum(make):
    policy, beta = make(4), 0.3
    result = O.best_in_class(policy, PROMPTS, "distance", beta)
    start = O.policy_objective(policy, policy, PROMPTS, "distance", beta).detach()
    gap = O.objective_gap(result.policy, policy, PROMPTS, "distance", beta)
    assert result.converged
    assert float(result.objective.mean()) > float(start.mean())
    assert bool((gap >= -1e-12).all())
    assert torch.allclose(gap, beta * O.kl_to_optimum(result.policy, policy, PROMPTS, "distance", beta),
                          rtol=1e-7, atol=1e-12)


def plain_population_loss(log_p, log_ref, rewards, beta, preference, loss_type):
    n = len(log_p)
    total = weight = 0.0
    for a, b in itertools.product(range(n), repeat=2):
        w = math.exp(log_ref[a] + log_ref[b])
        if preference == "argmax" and rewards[a] == rewards[b]:
            continue
        q = (1.0 if rewards[a] > rewards[b] else 0.0) if preference == "argmax" else \
            1 / (1 + math.exp(-(rewards[a] - rewards[b])))

        def loss(win, lose):
            h = (log_p[win] - log_ref[win]) - (log_p[lose] - log_ref[lose])
            return math.log1p(math.exp(-beta * h)) if loss_type == "sigmoid" else (h - 1 / (2 * beta)) ** 2

        total += w * (q * loss(a, b) + (1 - q) * loss(b, a))
        weight += w
    return total / weight


@pytest.mark.parametrize("preference", ["argmax", "bradley-terry"])
@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_population_dpo_loss_matches_a_plain_double_loop(preference, loss_type):
    reference, policy, beta = factorised(5), factorised(6), 0.4
    log_ref, rewards = O.policy_tables(reference, PROMPTS, "distance")
    log_p = O.policy_tables(policy, PROMPTS, "distance")[0]
    exact = population_dpo_loss(log_p, log_ref, rewards, beta, preference, loss_type)
    for row in range(len(PROMPTS)):
        plain = plain_population_loss(log_p[row].tolist(), log_ref[row].tolist(), rewards[row].tolist(), beta,
                                      preference, loss_type)
        assert float(exact[row]) == pytest.approx(plain, rel=1e-9)


def test_population_dpo_loss_with_no_kept_pair_is_zero_and_online_pairs_use_the_sampler():
    log_p = torch.log(torch.tensor([[0.2, 0.3, 0.5]], dtype=torch.float64))
    log_ref = torch.log(torch.tensor([[0.4, 0.4, 0.2]], dtype=torch.float64))
    flat = torch.ones(1, 3, dtype=torch.float64)
    assert float(population_dpo_loss(log_p, log_ref, flat, 0.5, "argmax")) == 0.0
    rewards = torch.tensor([[0.0, 1.0, 2.0]], dtype=torch.float64)
    offline = population_dpo_loss(log_p, log_ref, rewards, 0.5, "argmax")
    online = population_dpo_loss(log_p, log_ref, rewards, 0.5, "argmax", pair_log_probs=log_p)
    assert float(online) != pytest.approx(float(offline))
    plain_log_p, plain_log_ref = log_p[0].tolist(), log_ref[0].tolist()
    # pairs from mu = pi: the same double loop with pi's weights and pi_ref's ratios
    n, total, weight = 3, 0.0, 0.0
    for a, b in itertools.product(range(n), repeat=2):
        if a == b:
            continue
        win, lose = (a, b) if a > b else (b, a)  # the rewards rise with the index
        h = (plain_log_p[win] - plain_log_ref[win]) - (plain_log_p[lose] - plain_log_ref[lose])
        w = math.exp(plain_log_p[a] + plain_log_p[b])
        total, weight = total + w * math.log1p(math.exp(-0.5 * h)), weight + w
    assert float(online) == pytest.approx(total / weight, rel=1e-12)


def test_best_in_class_is_a_local_ascent_and_keeps_the_best_of_its_starts():
    """J_beta is not concave in the parameters: four starts (the policy, then three perturbed copies) end at
    local maxima more than 0.1 apart on the 2-token factorised toy, and the result is the best of them."""
    config = O.AscentConfig(starts=4, start_scale=2.0)
    result = O.best_in_class(factorised(4), PROMPTS, "distance", 0.3, config=config)
    assert len(result.start_objectives) == 4
    assert float(result.objective.mean()) == max(result.start_objectives)
    assert max(result.start_objectives) - min(result.start_objectives) > 0.1
    one = O.best_in_class(factorised(4), PROMPTS, "distance", 0.3, config=O.AscentConfig(starts=1))
    assert one.start_objectives == result.start_objectives[:1]
