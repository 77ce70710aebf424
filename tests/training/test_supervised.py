"""SFT and expert iteration in the loop: both policies, batched as alone, what they train on and count.

    sft: G fixed demonstrations per prompt;  expert iteration: the epoch's samples that pass the filter
    loss = -sum m w l / sum m w (lab.core.sft);  samples drawn / kept / trained counted from the start
"""

import numpy as np
import pytest
import torch

from lab.core.sft import group_best, mean_log_prob, sft_loss, token_accuracy
from lab.training.config import ConfigError, TrainConfig
from lab.training.kinds import KINDS
from lab.training.runs import RunSettings
from lab.training.epoch_tokens import EpochTokens
from lab.training.supervised import demonstrations
from lab.training.train import train
from tasks.sorting import make_task
from tests.training.test_batched import assert_same_run

POLICIES = ["factorized", "autoregressive"]


@pytest.fixture(scope="module")
def task():
    return make_task()


@pytest.mark.parametrize("policy", POLICIES)
def test_sft_on_optimal_demonstrations_learns_to_sort_the_prompts(task, policy):
    records = train(task, TrainConfig(epochs=15, loss="sft", policy=policy, lr=1e-2))
    assert records.epoch_metrics["greedy_accuracy"][0, -1] == 1.0
    accuracy = records.step_metrics["token_accuracy"][0]
    assert accuracy[-10] == 1.0  # the last epoch's first step (an autoregressive run measures no other)
    assert np.isnan(accuracy[-1]) == (policy == "autoregressive")
    logps = records.step_metrics["demo_logps"][0]
    assert logps[-1] > logps[0] and logps[-1] <= 0
    # the recorded loss is the token mean of -log pi over the demonstrations: -logps / (tokens per response)
    tokens = task.prompts.shape[1] + (policy == "autoregressive")  # sorted(x), then EOS
    np.testing.assert_allclose(records.step_metrics["loss"][0], -logps / tokens, rtol=1e-5)
    drawn, kept, trained = (records.epoch_metrics[n][0] for n in ("samples_drawn", "samples_kept", "samples_trained"))
    assert drawn[-1] == 0 and kept[-1] == 30 and trained[-1] == 30 * 10 * 15  # 3 prompts x G, 10 steps, 15 epochs


@pytest.mark.crosspath
@pytest.mark.parametrize("policy", POLICIES)
def test_a_run_is_the_same_alone_and_in_a_batch(task, policy):
    """In float64: in float32 a batch's other lanes round differently on some CPUs and a draw can flip."""
    configs = [TrainConfig(epochs=4, steps=3, loss="expert-iteration", policy=policy, seed=0, dtype="float64"),
               TrainConfig(epochs=4, steps=3, loss="expert-iteration", policy=policy, seed=1, ei_filter="threshold",
                           reward_threshold=2.0, lr=3e-3, dtype="float64")]
    batched = train(task, configs)
    for run, config in enumerate(configs):
        assert_same_run(train(task, config), batched, run)
    sft = [TrainConfig(epochs=3, steps=2, loss="sft", demos="noisy", policy=policy, seed=s, dtype="float64")
           for s in (0, 1)]
    batched = train(task, sft)
    for run, config in enumerate(sft):
        assert_same_run(train(task, config), batched, run)


def test_expert_iteration_counts_the_samples_its_filter_keeps(task):
    config = TrainConfig(epochs=5, steps=2, loss="expert-iteration", ei_filter="threshold", reward_threshold=3.0)
    records = train(task, config)
    rewards = np.stack([s.rewards[0] for s in train(task, config.replace(sample_every=1)).samples])  # [epoch b t]
    kept = (rewards >= 3.0).sum(axis=(1, 2)).cumsum()
    np.testing.assert_array_equal(records.epoch_metrics["samples_kept"][0], kept)
    np.testing.assert_array_equal(records.epoch_metrics["samples_trained"][0], kept * 2)
    np.testing.assert_array_equal(records.epoch_metrics["samples_drawn"][0], 30 * np.arange(1, 6))


def test_the_first_step_loss_is_the_nll_of_the_kept_samples(task):
    """Expert iteration's first loss is sft_loss of the epoch's group-best samples under the initial policy."""
    config = TrainConfig(epochs=1, steps=1, loss="expert-iteration")
    records = train(task, config)
    groups = records.samples[0]
    rewards = torch.tensor(groups.rewards)
    high, low = rewards.amax(-1, keepdim=True), rewards.amin(-1, keepdim=True)
    best = (rewards == high) & (high > low)
    kind = KINDS[config.policy](task, [config], [torch.Generator().manual_seed(config.seed)],
                                RunSettings.of([config], torch.device("cpu")).reward_groups, torch.device("cpu"))
    log_probs = kind.log_probs([p for _, p in kind.policy.named_parameters()], torch.tensor(groups.responses), None)[0]
    expected = sft_loss(log_probs.detach(), None, best.float())
    np.testing.assert_allclose(records.step_metrics["loss"][0], expected.numpy(), rtol=1e-6)


@pytest.mark.parametrize("policy", POLICIES)
def test_an_epochs_tokens_built_once_give_each_step_the_plain_loss_and_metrics_bit_for_bit(task, policy):
    """`EpochTokens` (the token weights built at an epoch's first step, a speed path) against lab.core.sft's plain
    functions on the fused pass's own log-probs: the NLL, its gradient, the mean sequence log-prob and the token
    accuracy are equal bit for bit, with a run that keeps nothing (NaN) beside runs that keep some."""
    configs = [TrainConfig(policy=policy, seed=s) for s in range(3)]
    kind = KINDS[policy](task, configs, [torch.Generator().manual_seed(s) for s in range(3)],
                         RunSettings.of(configs, torch.device("cpu")).reward_groups, torch.device("cpu"))
    parameters = [p for _, p in kind.policy.named_parameters()]
    responses = kind.sample()
    mask = kind.live_tokens(responses)
    weights = group_best(kind.rewards["inclusion-ordering"](kind.prompts, responses))
    weights[1] = 0.0  # nothing kept
    per_position = kind.step_metrics.from_log_softmax  # the factorised policy: hits from the positions' argmax
    for w in (weights, None):  # expert iteration's kept samples; SFT's demonstrations, every one counting
        log_probs, aux = kind.log_probs(parameters, responses, mask)
        tokens = EpochTokens.of(log_probs.detach(), mask, w, responses, aux.detach() if per_position else None)
        fast, plain = tokens.nll(log_probs), sft_loss(log_probs, mask, w)
        grads = [torch.autograd.grad(loss.sum(), parameters, retain_graph=True) for loss in (fast, plain)]
        predicted = kind.argmax_tokens(aux.detach(), responses)
        accuracy = token_accuracy(predicted, responses, mask, w)
        hits = tokens.position_hits(aux.detach()) if per_position else tokens.hits(predicted, responses)
        for a, b in [(fast, plain), *zip(*grads),
                     (tokens.mean_log_prob(log_probs.detach()), mean_log_prob(log_probs.detach(), w)),
                     (tokens.accuracy(hits), accuracy), (tokens.accuracy(tokens.hits(predicted, responses)), accuracy)]:
            assert a.dtype == b.dtype == torch.float32 and torch.equal(a.view(torch.int32), b.view(torch.int32))
        assert accuracy[1].isnan() == (w is not None) and accuracy.isfinite().any()


def test_noisy_demonstrations_replace_tokens_at_the_given_rate(task):
    config = TrainConfig(loss="sft", demos="noisy", demo_noise=0.5, group_size=400)
    kind = KINDS[config.policy](task, [config], [torch.Generator().manual_seed(0)],
                                RunSettings.of([config], torch.device("cpu")).reward_groups, torch.device("cpu"))
    demos = demonstrations(kind, [config], [torch.Generator().manual_seed(1)])
    changed = (demos != kind.targets(kind.prompts).unsqueeze(-2)).float().mean()
    # a replaced token is drawn uniformly, so it keeps its value with probability 1 / V: 0.5 (1 - 1/5) = 0.4
    assert abs(float(changed) - 0.5 * (1 - 1 / task.vocab_size)) < 0.02  # 3600 tokens: std about 0.008


@pytest.mark.parametrize("settings, message", [
    (dict(demos="noisy"), "--demos applies to --loss sft only"),
    (dict(loss="sft", demo_noise=0.1), "--demo-noise applies to --demos noisy only"),
    (dict(loss="sft", demos="noisy", demo_noise=1.5), "--demo-noise must lie in"),
    (dict(loss="sft", demos="policy"), "--demos policy needs --demos-from"),
    (dict(loss="sft", kl=0.1), "--kl does not apply to --loss sft"),
    (dict(loss="expert-iteration", ei_filter="threshold"), "needs --reward-threshold"),
    (dict(loss="expert-iteration", reward_threshold=2.0), "--reward-threshold applies to --ei-filter threshold only"),
    (dict(ei_filter="group-best"), "--ei-filter applies to --loss expert-iteration only"),
    (dict(loss="expert-iteration", delta="gae"), "--delta gae"),
])
def test_settings_that_do_not_apply_are_refused_with_one_line(settings, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**settings)
