"""`lab.experiments.drift`: the exact drift of a run's final policy from its start, against the loop's own log."""

import numpy as np

from lab.training.config import TrainConfig
from lab.experiments.drift import drift_from_start
from lab.training.train import train
from tasks.sorting import make_task


def test_drift_is_the_exact_kl_the_loop_logs_one_epoch_later():
    """With the reference frozen at the start, `kl_exact` at the first step of epoch E (before its update)
    is KL(pi after E epochs || pi_0): the drift of the same seeds trained for E epochs. This also checks
    that `initial_policy` is where `train` starts (the frozen reference is that start).

    Mutant: measuring the drift against a different seed's start does not match.
    """
    task = make_task()
    settings = dict(steps=4, kl=0.1, kl_period=0, delta="centered")
    short = [TrainConfig(epochs=5, seed=seed, **settings) for seed in (0, 1)]
    longer = [TrainConfig(epochs=6, seed=seed, **settings) for seed in (0, 1)]
    drift = drift_from_start(task, train(task, short))
    logged = train(task, longer).step_metrics["kl_exact"][:, 5 * settings["steps"]]
    np.testing.assert_allclose(drift, logged, rtol=1e-4)
    assert drift.min() > 1e-3  # the runs moved: the check is not 0 = 0
    swapped = train(task, short[::-1])
    swapped.configs = short  # each final state now paired with the other seed's start
    assert not np.allclose(drift_from_start(task, swapped), logged, rtol=1e-2)
