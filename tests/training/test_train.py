"""The training loop end to end (docs/task.md).

Short runs keep this fast; only the learning test uses the lecture's full settings.
"""

import math

import numpy as np
import pytest
import torch

from lab.training.config import ConfigError, TrainConfig
from lab.core.deltas import DeltaMode
from lab.training.lengths import EMPTY_WHEN_NONE
from lab.core.losses import SURROGATES
from lab.core.modes import TrainingLoss
from lab.policies.factorized import Policy
from lab.training.records import EPOCH_METRICS, METRIC_COLUMNS, STEP_METRICS
from lab.files.run_text import metrics_csv
from lab.training.train import train
from tasks.sorting import make_task

SHORT = dict(epochs=3, steps=3, seed=0)
HELDOUT_METRICS = {"heldout_greedy_reward", "heldout_greedy_accuracy"}


def initial_state(task, config: TrainConfig) -> dict[str, torch.Tensor]:
    """The parameters a run starts from: Policy initialised by a generator seeded with the config's seed."""
    policy = Policy(task.vocab_size, task.prompts.shape[1], task.response_length, config.dim,
                    generator=torch.Generator().manual_seed(config.seed))
    return {name: p.detach() for name, p in policy.named_parameters()}


def assert_trained_and_finite(task, records, config):
    start = initial_state(task, config)
    assert set(records.state) == set(start)
    for name, value in records.state.items():
        assert value.shape == (1, *start[name].shape)
        assert not torch.equal(value[0], start[name]), f"{name} did not change"
    for name, values in records.step_metrics.items():
        assert np.isfinite(values).all(), name
    for name, values in records.epoch_metrics.items():
        if name not in HELDOUT_METRICS | EMPTY_WHEN_NONE:
            assert np.isfinite(values).all(), name


def assert_ratio_one_on_first_steps(records, steps):
    """Each epoch's first step sees the very policy that sampled the batch: every ratio is exactly 1."""
    first = records.step_metrics["ratio_mean"][:, ::steps]
    assert (first == 1.0).all(), first
    assert (records.step_metrics["ratio_max"][:, ::steps] == 1.0).all()


@pytest.mark.parametrize("loss", list(SURROGATES))
@pytest.mark.parametrize("delta", list(DeltaMode))
def test_every_delta_and_loss_combination_trains(delta, loss):
    """A short run of every delta x loss moves every parameter; all metrics are finite."""
    task = make_task()
    luspo = {"loss_agg": "seq-mean-token-sum"} if loss is TrainingLoss.luspo else {}  # LUSPO's sum over tokens
    config = TrainConfig(delta=delta, loss=loss, **SHORT, **luspo)
    records = train(task, config)
    assert_trained_and_finite(task, records, config)
    assert_ratio_one_on_first_steps(records, config.steps)
    if loss is not TrainingLoss.naive:  # later steps reuse the batch: ratios move away from 1
        assert (records.step_metrics["ratio_mean"][:, 1:config.steps] != 1.0).all()


@pytest.mark.parametrize("kl_period, refreshed", [(2, [0, 2, 4]), (0, [0])])
def test_a_kl_run_trains_and_refreshes_its_reference(kl_period, refreshed):
    """The KL run the lecture's script could not execute (model.clone()) runs end to end.

    Right after the reference is (re)frozen it equals the policy, so the first step's k3 is exactly 0;
    on the first step of any other epoch the policy has moved away from it, so k3 > 0.
    """
    task = make_task()
    config = TrainConfig(epochs=5, steps=3, seed=1, delta="centered", loss="clipped", kl=0.5, kl_period=kl_period)
    records = train(task, config)
    assert_trained_and_finite(task, records, config)
    assert_ratio_one_on_first_steps(records, config.steps)
    kl = records.step_metrics["kl"][0]
    first_step_kl = kl[::config.steps]
    for epoch in range(config.epochs):
        if epoch in refreshed:
            assert first_step_kl[epoch] == 0.0, epoch
        else:
            assert first_step_kl[epoch] > 0.0, epoch
    assert (kl >= 0).all()
    np.testing.assert_allclose(records.step_metrics["loss"][0],
                               records.step_metrics["pg_loss"][0] + config.kl * kl, rtol=1e-5, atol=1e-7)
    without = train(task, config.replace(kl=0.0))
    assert not torch.equal(without.state["decode"], records.state["decode"])  # the penalty acts


def test_centered_deltas_raise_the_mean_reward_on_the_lecture_prompts():
    """With the lecture's settings and centered deltas the reward rises.

    The lecture's single seed (5) and seven more, trained together: every run's mean reward over its
    last 10 epochs (300 samples) beats its first 10. Seed 5 goes from about 3.25 to 3.66 (optimum 5).
    """
    seeds = [5, 0, 1, 2, 3, 4, 6, 7]
    configs = [TrainConfig(delta="centered", seed=s) for s in seeds]
    records = train(make_task(), configs)
    rewards = records.epoch_metrics["mean_reward"]  # float[run epoch]
    first, last = rewards[:, :10].mean(axis=1), rewards[:, -10:].mean(axis=1)
    assert (last > first).all(), list(zip(seeds, first, last))
    assert last[0] - first[0] > 0.3
    assert (records.optimum == 5.0).all()
    assert (last <= 5.0).all()


def test_same_config_and_seed_give_identical_records():
    """Training is deterministic given the config and seed."""
    task = make_task()
    config = TrainConfig(epochs=4, steps=2, seed=3, delta="normalized", loss="clipped", kl=0.1, kl_period=2,
                         sample_every=2)
    a, b = train(task, config), train(task, config)
    for table in ("step_metrics", "epoch_metrics"):
        for name, values in getattr(a, table).items():
            np.testing.assert_array_equal(values, getattr(b, table)[name])
    for name in a.state:
        assert torch.equal(a.state[name], b.state[name])
    assert [s.epoch for s in a.samples] == [s.epoch for s in b.samples] == [0, 2, 3]
    for x, y in zip(a.samples, b.samples):
        np.testing.assert_array_equal(x.responses, y.responses)
        np.testing.assert_array_equal(x.deltas, y.deltas)
    np.testing.assert_array_equal(a.greedy_responses, b.greedy_responses)
    assert metrics_csv(a) == metrics_csv(b)
    other = train(task, config.replace(seed=4))
    assert not np.array_equal(other.step_metrics["loss"], a.step_metrics["loss"])


def test_a_run_is_the_same_alone_or_inside_a_batch():
    """`lab.training.train`: runs trained together with different per-run settings each match their solo run."""
    task = make_task()
    configs = [TrainConfig(epochs=3, steps=2, seed=5),
               TrainConfig(epochs=3, steps=2, seed=6, delta="loo", loss="clipped", clip_eps=0.2, lr=3e-3),
               TrainConfig(epochs=3, steps=2, seed=7, delta="max", loss="unclipped", reward="distance", kl=0.3)]
    together = train(task, configs)
    for r, config in enumerate(configs):
        alone = train(task, config)
        for snap_together, snap_alone in zip(together.samples, alone.samples):
            np.testing.assert_array_equal(snap_together.responses[r], snap_alone.responses[0])
        for name, values in alone.step_metrics.items():
            np.testing.assert_allclose(together.step_metrics[name][r], values[0], rtol=1e-4, atol=1e-6)
        for name in alone.state:
            torch.testing.assert_close(together.state[name][r], alone.state[name][0])


def test_records_have_the_documented_metrics():
    """Every documented step and epoch metric is recorded, with [run step] / [run epoch] shapes."""
    task = make_task(eval_prompts=[[4, 4, 0], [0, 0, 1]])
    config = TrainConfig(epochs=3, steps=2, seed=0, delta="centered")
    records = train(task, [config, config.replace(seed=1)])
    assert set(records.step_metrics) == set(STEP_METRICS)
    assert set(records.epoch_metrics) == set(EPOCH_METRICS)
    assert all(text.strip() for text in (*STEP_METRICS.values(), *EPOCH_METRICS.values()))
    for values in records.step_metrics.values():
        assert values.shape == (2, 6)
    for name, values in records.epoch_metrics.items():
        assert values.shape == (2, 3)
        if name not in EMPTY_WHEN_NONE:  # held-out metrics are filled when held-out prompts exist
            assert np.isfinite(values).all(), name
    assert records.greedy_responses.shape == (2, 3, 3)
    assert ((records.epoch_metrics["greedy_accuracy"] >= 0) & (records.epoch_metrics["greedy_accuracy"] <= 1)).all()
    np.testing.assert_allclose(records.epoch_metrics["reward_fraction"] * 5, records.epoch_metrics["mean_reward"],
                               rtol=1e-6)  # every lecture prompt's optimum is 5
    text = metrics_csv(records, {"seed": [0, 1]})
    lines = text.splitlines()
    assert lines[0].split(",") == ["seed", *METRIC_COLUMNS]
    assert {"epoch", "step", "loss", "mean_reward"} <= set(METRIC_COLUMNS)
    assert len(lines) == 1 + 2 * 6  # one row per (run, optimizer step)
    assert [line.split(",")[1:4] for line in lines[1:7]] == [
        [str(e), str(s), str(s % 2)] for s in range(6) for e in [s // 2]]


def test_a_group_of_one_trains_with_raw_deltas_and_finite_metrics():
    """G = 1 is fine for raw and max; the group std of a single reward is 0, not NaN."""
    task = make_task()
    for delta in ("raw", "max"):
        config = TrainConfig(epochs=2, steps=2, group_size=1, delta=delta)
        records = train(task, config)
        assert_trained_and_finite(task, records, config)
        assert (records.epoch_metrics["reward_std"] == 0).all()
        assert (records.epoch_metrics["zero_std_fraction"] == 1).all()


def test_explicit_generators_replace_the_config_seeds():
    task = make_task()
    config = TrainConfig(epochs=2, steps=2, seed=5)
    by_generator = train(task, config, generators=[torch.Generator().manual_seed(9)])
    by_seed = train(task, config.replace(seed=9))
    np.testing.assert_array_equal(by_generator.step_metrics["loss"], by_seed.step_metrics["loss"])


def test_progress_is_reported_after_every_epoch():
    calls = []
    train(make_task(), TrainConfig(epochs=3, steps=1), progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]


def test_bad_batches_and_rewards_are_rejected():
    task = make_task()
    with pytest.raises(ConfigError, match="must share steps"):
        train(task, [TrainConfig(steps=1), TrainConfig(steps=2)])
    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        train(task, TrainConfig(epochs=1, reward="nope"))
    with pytest.raises(ConfigError, match="no runs"):
        train(task, [])


@pytest.mark.parametrize("changes, message", [
    (dict(epochs=0), "epochs must be a positive integer"),
    (dict(steps=-1), "steps must be a positive integer"),
    (dict(group_size=0), "group_size must be a positive integer"),
    (dict(dim=0), "dim must be a positive integer"),
    (dict(lr=0.0), "lr must be > 0"),
    (dict(lr=math.inf), "lr must be"),
    (dict(clip_eps=0.0), "clip_eps must lie in"),
    (dict(clip_eps=1.0), "clip_eps must lie in"),
    (dict(kl=-0.1), "kl \\(beta\\) must be >= 0"),
    (dict(kl=math.inf), "kl \\(beta\\) must be"),
    (dict(kl=math.nan), "kl \\(beta\\) must be"),
    (dict(kl_period=-1), "kl_period must be >= 0"),
    (dict(seed=2**64), "seed must be an integer from -2\\*\\*63"),
    (dict(delta="normalized", group_size=1), "needs group_size >= 2"),
    (dict(delta="loo", group_size=1), "needs group_size >= 2"),
    (dict(delta="mean"), "unknown delta 'mean'; choose one of: raw, centered, normalized, max, loo"),
    (dict(loss="ppo"), "unknown loss 'ppo'; choose one of: naive, unclipped, clipped"),
])
def test_config_rejects_bad_values_with_a_clear_message(changes, message):
    """Sizes <= 0, lr <= 0 (or not finite), eps outside (0, 1), negative or infinite beta."""
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**changes)


def test_config_defaults_are_the_lectures():
    """100 epochs, 10 steps, G 10, Adam lr 1e-3, seed 5, dim 10, inclusion-ordering, raw,
    naive, clip 0.01, kl 0, kl period 10."""
    c = TrainConfig()
    assert (c.epochs, c.steps, c.group_size, c.lr, c.seed, c.dim, c.reward, c.delta, c.loss, c.clip_eps, c.kl,
            c.kl_period) == (100, 10, 10, 1e-3, 5, 10, "inclusion-ordering", DeltaMode.raw, TrainingLoss.naive,
                             0.01, 0.0, 10)
    assert TrainConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ConfigError, match="unknown config fields: colour"):
        TrainConfig.from_dict({"colour": 1})


def test_the_loop_matches_a_plain_reimplementation_of_spec_section_1():
    """docs/task.md, rewritten here with a plain Policy, torch.optim.Adam and the formulas inline:
    sample G per prompt from the run's generator, score, center, freeze old and reference log-probs,
    then `steps` clipped + beta * k3 steps on the batch. Every recorded step metric and the samples agree."""
    task = make_task()
    config = TrainConfig(epochs=2, steps=3, seed=2, delta="centered", loss="clipped", clip_eps=0.05, kl=0.2,
                         kl_period=1, lr=0.01, sample_every=1)
    records = train(task, config)
    g = torch.Generator().manual_seed(config.seed)
    policy = Policy(task.vocab_size, 3, 3, config.dim, generator=g)
    adam = torch.optim.Adam(policy.parameters(), lr=config.lr)
    prompts, eps, beta = task.prompts, config.clip_eps, config.kl
    expected = {name: [] for name in ("loss", "pg_loss", "kl", "ratio_mean", "ratio_max", "clip_fraction", "entropy")}
    for epoch in range(config.epochs):
        with torch.no_grad():
            ref_log_softmax = torch.log_softmax(policy(prompts), -1)  # kl_period 1: refreshed every epoch
            probs = torch.softmax(policy(prompts).double(), -1)
            cdf = probs.cumsum(-1)  # float[batch pos vocab]
            u = torch.rand(3, config.group_size, 3, generator=g, dtype=torch.float64)  # batch trial pos
            responses = (cdf.unsqueeze(1) <= u.unsqueeze(-1)).sum(-1).clamp(max=task.vocab_size - 1)
        np.testing.assert_array_equal(records.samples[epoch].responses[0], responses.numpy())
        rewards = task.reward_fn(config.reward)(prompts, responses)
        deltas = rewards - rewards.mean(-1, keepdim=True)
        np.testing.assert_allclose(records.samples[epoch].deltas[0], deltas.numpy(), rtol=1e-6, atol=1e-6)
        take = lambda log_softmax: log_softmax.unsqueeze(1).expand(3, config.group_size, 3, -1).gather(  # noqa: E731
            -1, responses.unsqueeze(-1)).squeeze(-1)
        old, ref = take(ref_log_softmax), take(ref_log_softmax)
        d = deltas.unsqueeze(-1)
        for _ in range(config.steps):
            log_softmax = torch.log_softmax(policy(prompts), -1)
            lp = take(log_softmax)
            rho = torch.exp(lp - old)
            pg = -torch.minimum(rho * d, rho.clamp(1 - eps, 1 + eps) * d).mean()
            k3 = torch.exp(ref - lp) - (ref - lp) - 1
            kl = k3.sum(-1).mean()
            loss = pg + beta * kl
            adam.zero_grad()
            loss.backward()
            adam.step()
            clipped = ((rho < 1 - eps) & (d < 0)) | ((rho > 1 + eps) & (d > 0))
            for name, value in (("loss", loss), ("pg_loss", pg), ("kl", kl), ("ratio_mean", rho.mean()),
                                ("ratio_max", rho.max()), ("clip_fraction", clipped.float().mean()),
                                ("entropy", -(log_softmax.exp() * log_softmax).sum(-1).mean())):
                expected[name].append(value.item())
    for name, values in expected.items():
        np.testing.assert_allclose(records.step_metrics[name][0], values, rtol=1e-4, atol=1e-6, err_msg=name)
    for name, p in policy.named_parameters():
        torch.testing.assert_close(records.state[name][0], p.detach(), rtol=1e-4, atol=1e-5)
