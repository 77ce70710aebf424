"""Batched training: a run is the same alone or inside a sweep, and runs never couple.

Samples (and so every sample-based metric) must be identical; quantities that go
through float matrix products may differ in the last bits, because a batched
matmul may sum in another order than a single one (and, in float32, some CPUs' kernels
round a batch's lanes differently, enough to flip a draw after a few epochs). So the
runs here train in float64, whose last-bit differences (about 1e-16) never flip a draw:
their parameters agree to FLOAT64_ATOL and their stored metrics (float32 in the records)
to one float32 rounding step. A float32 run is compared to float32's tolerances.
"""

import numpy as np
import pytest
import torch

from lab.training.config import TrainConfig
from lab.core.deltas import compute_deltas
from lab.core.losses import compute_loss
from lab.policies.factorized import Policy, PolicyStack
from lab.policies.sampling import response_log_probs
from lab.training.train import train
from tasks.sorting import make_task

pytestmark = pytest.mark.crosspath  # .ci/run runs these under other CPU kernel sets too

STEP_RTOL, STEP_ATOL = 1e-4, 1e-5
"""Float32 agreement of step metrics and parameters between a run alone and inside a batch."""
STORED_RTOL, FLOAT64_ATOL = 2.5e-7, 1e-12
"""Float64 runs: their metrics, stored in float32, within four float32 steps (a 1e-16 difference can cross one
rounding boundary); their float64 parameters within 1e-12 (measured: about 1e-16 after 24 steps)."""

EPOCHS = 8
SAMPLE_METRICS = ("mean_reward", "reward_fraction", "reward_std", "zero_std_fraction")

MIXED = [
    TrainConfig(dtype="float64", epochs=EPOCHS, seed=0, delta="raw", loss="naive"),
    TrainConfig(dtype="float64", epochs=EPOCHS, seed=1, delta="centered", loss="unclipped", lr=3e-3),
    TrainConfig(dtype="float64", epochs=EPOCHS, seed=2, delta="normalized", loss="clipped", clip_eps=0.2),
    TrainConfig(dtype="float64", epochs=EPOCHS, seed=3, delta="max", loss="clipped", reward="distance", kl=0.1),
    TrainConfig(dtype="float64", epochs=EPOCHS, seed=4, delta="loo", loss="naive", reward="distance", kl=0.5, lr=1e-2),
    TrainConfig(dtype="float64", epochs=EPOCHS, seed=3, delta="centered", loss="naive", reward="blended"),
]
"""Every delta and loss, three rewards, KL on and off, different eps and lr, a repeated seed."""


def assert_same_run(alone, batched, run: int) -> None:
    exact = alone.configs[0].dtype.value == "float64"
    rtol, atol = (STORED_RTOL, FLOAT64_ATOL) if exact else (STEP_RTOL, STEP_ATOL)
    for a, b in zip(alone.samples, batched.samples):
        np.testing.assert_array_equal(a.responses[0], b.responses[run])
        np.testing.assert_array_equal(a.rewards[0], b.rewards[run])
        np.testing.assert_allclose(a.deltas[0], b.deltas[run], rtol=rtol, atol=atol)
    for name in SAMPLE_METRICS:
        np.testing.assert_array_equal(alone.epoch_metrics[name][0], batched.epoch_metrics[name][run], err_msg=name)
    for name, values in alone.step_metrics.items():
        np.testing.assert_allclose(values[0], batched.step_metrics[name][run], rtol=rtol, atol=atol, err_msg=name)
    for name, value in alone.state.items():
        torch.testing.assert_close(value[0], batched.state[name][run], rtol=0 if exact else rtol,
                                   atol=FLOAT64_ATOL if exact else atol)
    np.testing.assert_array_equal(alone.greedy_responses[0], batched.greedy_responses[run])


@pytest.fixture(scope="module")
def task():
    return make_task()


@pytest.fixture(scope="module")
def batched(task):
    return train(task, MIXED)


@pytest.mark.parametrize("run", range(len(MIXED)), ids=[f"{c.delta.value}-{c.loss.value}-{c.reward}-kl{c.kl}"
                                                        for c in MIXED])
def test_a_run_is_the_same_alone_or_inside_a_mixed_sweep(task, batched, run):
    """Run r of a sweep that mixes deltas, losses, rewards, KL, eps and lr equals the same config trained alone."""
    assert_same_run(train(task, MIXED[run]), batched, run)


def test_the_order_of_runs_in_a_sweep_does_not_matter(task, batched):
    """Reversing the sweep's configs reverses its records and changes nothing else."""
    reversed_records = train(task, MIXED[::-1])
    for run in range(len(MIXED)):
        np.testing.assert_array_equal(reversed_records.epoch_metrics["mean_reward"][len(MIXED) - 1 - run],
                                      batched.epoch_metrics["mean_reward"][run])
        np.testing.assert_allclose(reversed_records.step_metrics["loss"][len(MIXED) - 1 - run],
                                   batched.step_metrics["loss"][run], rtol=STEP_RTOL, atol=STEP_ATOL)


def test_changing_one_run_leaves_the_others_untouched(task, batched):
    """Nothing couples runs: a different lr, delta and seed for run 0 leaves runs 1.. exactly as they were."""
    changed = [MIXED[0].replace(lr=5e-2, delta="centered", seed=99), *MIXED[1:]]
    other = train(task, changed)
    assert not np.array_equal(other.step_metrics["loss"][0], batched.step_metrics["loss"][0])
    for run in range(1, len(MIXED)):
        np.testing.assert_array_equal(other.epoch_metrics["mean_reward"][run], batched.epoch_metrics["mean_reward"][run])
        np.testing.assert_allclose(other.step_metrics["loss"][run], batched.step_metrics["loss"][run],
                                   rtol=STEP_RTOL, atol=STEP_ATOL)


def test_the_summed_loss_gives_each_run_exactly_its_own_gradient():
    """d(sum_r L_r)/d theta_r = dL_r/d theta_r: the stacked gradient equals each Policy's own gradient."""
    generators = [torch.Generator().manual_seed(s) for s in range(3)]
    stack = PolicyStack(5, 3, 3, 10, [torch.Generator().manual_seed(s) for s in range(3)])
    prompts = torch.tensor([[1, 0, 2], [3, 2, 4], [1, 2, 3]])
    responses = torch.randint(5, (3, 3, 4, 3), generator=torch.Generator().manual_seed(7))
    deltas = torch.randn(3, 3, 4, generator=torch.Generator().manual_seed(8))
    loss = compute_loss(response_log_probs(stack(prompts), responses), deltas, "naive")
    loss.sum().backward()
    for run, generator in enumerate(generators):
        policy = Policy(5, 3, 3, 10, generator)
        compute_loss(response_log_probs(policy(prompts), responses[run]), deltas[run], "naive").backward()
        for name, parameter in policy.named_parameters():
            torch.testing.assert_close(getattr(stack, name).grad[run], parameter.grad, rtol=1e-5, atol=1e-7)


def test_each_run_samples_what_its_generator_draws_alone():
    """`sample_responses` with one generator per run draws run r's responses as the run alone would,
    and leaves each generator where drawing alone leaves it."""
    from lab.policies.sampling import sample_responses

    logits = torch.randn(4, 3, 3, 5, generator=torch.Generator().manual_seed(0))  # float[run batch pos vocab]
    together = [torch.Generator().manual_seed(s) for s in range(4)]
    alone = [torch.Generator().manual_seed(s) for s in range(4)]
    for _ in range(3):
        expected = torch.stack([sample_responses(lg, 10, g) for lg, g in zip(logits, alone)])
        assert torch.equal(sample_responses(logits, 10, together), expected)
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(together, alone))


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_the_kl_options_batch_like_every_mode(task, policy):
    """Runs that differ in --kl-estimator and --kl-in (k3, k2 in the loss; k1, k3 in the reward; beta = 0 beside
    them) train together, each as it trains alone, for both policies; a reward run's deltas are no longer its
    task rewards' centered deltas (samples.txt keeps the task rewards)."""
    base = TrainConfig(epochs=6, steps=2, seed=1, delta="centered", loss="clipped", kl=0.3, kl_period=0, policy=policy)
    configs = [base, base.replace(kl_estimator="k2"), base.replace(kl_estimator="k1", kl_in="reward"),
               base.replace(kl_estimator="k3", kl_in="reward", seed=2), base.replace(kl=0.0, kl_in="reward")]
    batched = train(task, configs)
    for run, config in enumerate(configs):
        assert_same_run(train(task, config), batched, run)
    last = batched.samples[-1]
    unpenalised = compute_deltas(torch.from_numpy(last.rewards[2]), "centered").numpy()
    assert np.abs(last.deltas[2] - unpenalised).max() > 1e-3
    np.testing.assert_allclose(last.deltas[4], compute_deltas(torch.from_numpy(last.rewards[4]), "centered").numpy(),
                               rtol=1e-6, atol=1e-6)  # beta = 0: nothing in the reward
