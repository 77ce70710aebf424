"""--max-grad-norm in the loop: each run of a batch clipped to its own norm, as alone; off changes nothing.

    grad_norm = the step's pre-clip global norm;  grad_clipped = 1 where it exceeded the limit
"""

import numpy as np
import pytest
import torch

from lab.training.clipping import GradClip, plain_run_grad_norms, run_grad_norms
from lab.training.config import ConfigError, TrainConfig
from lab.training.train import train
from tasks.sorting import make_task
from tests.training.test_batched import assert_same_run

CLIPPED = [TrainConfig(epochs=4, steps=3, seed=0, max_grad_norm=0.5),
           TrainConfig(epochs=4, steps=3, seed=1, delta="centered", loss="clipped", max_grad_norm=2.0, kl=0.1),
           TrainConfig(epochs=4, steps=3, seed=2)]
"""Two limits and a run without one, in one batch."""


@pytest.fixture(scope="module")
def task():
    return make_task()


@pytest.mark.crosspath
@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_a_batched_runs_clipping_is_the_clipping_of_the_run_alone(task, policy):
    configs = [c.replace(policy=policy, dtype="float64") for c in CLIPPED]  # float64: the same on every CPU
    batched = train(task, configs)
    for run, config in enumerate(configs):
        assert_same_run(train(task, config) if config.max_grad_norm else _with_norms(task, config), batched, run)
    clipped = batched.step_metrics["grad_clipped"]
    assert clipped[0].sum() > 0 and clipped[2].sum() == 0  # a small limit clips; no limit never does
    assert (batched.step_metrics["grad_norm"] > 0).all()


def _with_norms(task, config):
    """A run without a limit trained alone has no grad_norm column: its norms, from a limit it never reaches."""
    records = train(task, config.replace(max_grad_norm=1e30))
    return records


def test_the_limit_binds_exactly_where_grad_norm_exceeds_it(task):
    records = train(task, CLIPPED[0])
    norms, clipped = records.step_metrics["grad_norm"][0], records.step_metrics["grad_clipped"][0]
    np.testing.assert_array_equal(clipped == 1, norms + 1e-6 > 0.5)


def test_without_a_limit_nothing_is_recorded_and_the_run_is_unchanged(task):
    records = train(task, TrainConfig(epochs=3, steps=2))
    assert "grad_norm" not in records.step_metrics and "grad_clipped" not in records.step_metrics
    assert "max_grad_norm" not in TrainConfig().to_dict()


def test_grad_clip_scales_each_run_to_its_own_norm():
    grads = [torch.tensor([[3.0, 4.0], [0.3, 0.4]]), torch.zeros(2, 1)]
    params = [torch.zeros(2, 2, requires_grad=True), torch.zeros(2, 1, requires_grad=True)]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    GradClip([1.0, None], torch.device("cpu"))(params)
    torch.testing.assert_close(params[0].grad, torch.tensor([[3.0, 4.0], [0.3, 0.4]]) * torch.tensor(
        [[1.0 / (5.0 + 1e-6)], [1.0]]))
    torch.testing.assert_close(run_grad_norms(grads), torch.tensor([5.0, 0.5]))


@pytest.mark.parametrize("value", [0.0, -1.0, float("inf"), float("nan")])
def test_a_limit_must_be_positive_and_finite(value):
    with pytest.raises(ConfigError, match="max_grad_norm must be > 0"):
        TrainConfig(max_grad_norm=value)


def test_the_fast_norms_are_the_plain_norms_of_each_runs_whole_gradient():
    """`run_grad_norms` (each parameter's norm in its memory order, a transposed one included) against each run's
    gradients flattened into one vector: equal to float32 rounding (a sum of the norms, not of their squares, fails)."""
    generator = torch.Generator().manual_seed(4)
    grads = [torch.randn(6, 5, 10, generator=generator), torch.randn(6, 10, 15, generator=generator).mT,
             torch.randn(6, 3, generator=generator)]
    torch.testing.assert_close(run_grad_norms(grads), plain_run_grad_norms(grads), rtol=1e-6, atol=0)
