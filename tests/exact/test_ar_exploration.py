"""Exact exploration metrics of the autoregressive policy (lab/exact/ar_exploration.py) against enumeration:
every response's probability from lab.exact.varlen, its reward, and the definitions of lab.exact.exploration."""

import torch

import lab.policies as P
from lab.exact.ar_exploration import exploration_columns, varlen_exploration
from lab.exact.prefix_tree import varlen_response_probs
from lab.exact.varlen import all_probs, enumerate_responses
from lab.exact.prefix_tree import prefix_log_softmaxes
from tasks.sorting import variable_length_reward


def test_prefix_levels_give_every_responses_probability_and_the_exploration_metrics():
    prompts = torch.tensor([[0, 2, 1], [3, 3, 0]])
    policy = P.make_policy("autoregressive", 4, 3, 4, 5, torch.Generator().manual_seed(0)).double()
    with torch.no_grad():
        levels = prefix_log_softmaxes(dict(policy.named_parameters()), prompts)
        probs = varlen_response_probs(levels)
        expected = all_probs(policy, prompts)  # float[batch n]
    torch.testing.assert_close(probs, expected, rtol=1e-10, atol=1e-12)
    assert torch.allclose(probs.sum(-1), torch.ones(2, dtype=torch.float64))

    responses = enumerate_responses(policy)
    reward = variable_length_reward("inclusion-ordering", 4)
    table = reward(prompts, responses.expand(2, *responses.shape)).double()  # float[batch n]
    optimum = table.amax(-1)
    optimal, zero_std = varlen_exploration(probs, exploration_columns(table, optimum), group_size=3)
    plain_optimal = (expected * (table == optimum.unsqueeze(-1))).sum(-1).mean()
    plain_zero = torch.stack([sum(expected[b][table[b] == v].sum() ** 3 for v in table[b].unique())
                              for b in range(2)]).mean()
    torch.testing.assert_close(optimal, plain_optimal)
    torch.testing.assert_close(zero_std, plain_zero)
    assert 0 < optimal < 1 and 0 < zero_std < 1


def test_the_loop_records_the_exact_exploration_of_each_epochs_sampling_policy():
    """optimal_prob of epoch 0 is P(sorted(x) + EOS) under the initial policy, averaged over prompts
    (the inclusion-ordering reward's only optimum); a stack of two runs records each run's own."""
    from lab.training.config import TrainConfig
    from lab.training.train import train
    from lab.training.lengths import eos_targets
    from tasks.sorting import make_task

    task = make_task()
    configs = [TrainConfig(epochs=2, steps=1, policy="autoregressive", seed=s) for s in (0, 1)]
    records = train(task, configs)
    assert records.exploration_exact
    targets = eos_targets(task.targets(task.prompts), 5, 5)
    for run, config in enumerate(configs):
        start = P.make_policy("autoregressive", 5, 3, 5, 10, torch.Generator().manual_seed(config.seed)).double()
        with torch.no_grad():
            p_target = P.sequence_log_probs(start, task.prompts, targets.unsqueeze(-2)).exp().mean()
        torch.testing.assert_close(float(records.epoch_metrics["optimal_prob"][run, 0]), p_target.item(),
                                   rtol=1e-4, atol=1e-7)
        zero = records.epoch_metrics["zero_std_prob"][run]
        assert ((zero > 0) & (zero < 1)).all()


def test_a_reward_with_many_values_is_summed_by_index_to_the_same_metrics():
    """A reward model's score has about one value per response: past DENSE_VALUES the columns become a ValueIndex,
    whose scatter-add gives the definitions' P(optimal) and sum_v P(R = v)^G (ties included), also in pieces."""
    from lab.exact.ar_exploration import DENSE_VALUES, ValueIndex

    prompts = torch.tensor([[0, 2, 1], [3, 3, 0]])
    policy = P.make_policy("autoregressive", 4, 3, 4, 5, torch.Generator().manual_seed(0)).double()
    with torch.no_grad():
        probs = all_probs(policy, prompts)  # float[batch n]
    n = probs.shape[-1]
    table = torch.randn(2, n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    table[:, :10] = table[:, :1]  # ten responses tie at one value
    optimum = table.amax(-1)
    columns = exploration_columns(table, optimum)
    assert isinstance(columns, ValueIndex) and columns.width > DENSE_VALUES
    plain_optimal = (probs * (table >= optimum.unsqueeze(-1) - 1e-6)).sum(-1).mean()
    plain_zero = torch.stack([sum(probs[b][table[b] == v].sum() ** 3 for v in table[b].unique())
                              for b in range(2)]).mean()
    stacked = torch.stack([probs, probs.flip(-1)])  # a run axis
    for pieces in (probs, [probs[:, :100], probs[:, 100:]]):
        optimal, zero_std = varlen_exploration(pieces, columns, group_size=3)
        torch.testing.assert_close(optimal, plain_optimal, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(zero_std, plain_zero, rtol=1e-12, atol=1e-14)
    optimal, zero_std = varlen_exploration(stacked, columns, group_size=3)
    assert optimal.shape == zero_std.shape == (2,)
    torch.testing.assert_close(zero_std[0], plain_zero, rtol=1e-12, atol=1e-14)
