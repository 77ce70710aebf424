"""The fast engine `lab.training.train.train` is the plain loop `lab.training.simple_loop.simple_train`, made fast.

For a seed both draw the same samples (exactly: the same uniforms meet the same CDFs) and end at
the same parameters, to a stated tolerance: their gradients are the same sums in another order, and
`lab.training.optim.RunAdam` and `torch.optim.Adam` round Adam's update differently (RunAdam scales a
unit-lr update by each run's lr afterwards), by about one ulp per step. The runs here are float64
(`--dtype float64`): in float32 that ulp (and the CPU's kernel set, AVX-512 against AVX2 or none)
moves a parameter by about 2e-6 over the lecture's 1000 steps, and on some CPUs flips a draw after a
few epochs; in float64 the parameters agree to PARAMETER_ATOL on every CPU. The fast loop stores its losses in float32, so they agree to its rounding (LOSS_RTOL).
"""

import numpy as np
import pytest
import torch

from lab.training.config import TrainConfig
from lab.training.simple_loop import simple_train
from lab.training.train import train
from tasks.sorting import make_task

pytestmark = pytest.mark.crosspath  # .ci/run runs these under other CPU kernel sets too

PARAMETER_ATOL = 1e-10
"""Largest parameter difference allowed after a float64 run. Most parameters agree to 1e-15 after 1000 steps; where a
parameter's exact gradient is 0, the loops' rounding residues r (about 1e-17) become Adam steps of lr * r / eps
(eps = 1e-8): about 1e-12 a step, under 1e-10 over the runs here (measured: 3.5e-12 for seed 4's KL-in-reward run)."""
LOSS_RTOL, LOSS_ATOL = 2.5e-7, 1e-12
"""The fast loop's losses are stored in float32: within four of its rounding steps of the plain loop's float64."""
EXACT = dict(dtype="float64")


def assert_same_run(task, config):
    plain = simple_train(task, config)
    fast = train(task, config.replace(sample_every=1))
    assert len(fast.samples) == config.epochs
    for epoch, snapshot in enumerate(fast.samples):
        np.testing.assert_array_equal(snapshot.responses[0], plain.responses[epoch].numpy(), err_msg=f"epoch {epoch}")
        np.testing.assert_array_equal(snapshot.rewards[0], plain.rewards[epoch].numpy())
        np.testing.assert_allclose(snapshot.deltas[0], plain.deltas[epoch].numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(fast.step_metrics["loss"][0], plain.losses.flatten().numpy(),
                               rtol=LOSS_RTOL, atol=LOSS_ATOL)
    for name, value in plain.policy.named_parameters():
        torch.testing.assert_close(fast.state[name][0], value.detach(), rtol=0, atol=PARAMETER_ATOL, msg=name)
    return plain, fast


@pytest.mark.parametrize("settings", [
    dict(delta="raw", loss="naive"),
    dict(delta="centered", loss="clipped", clip_eps=0.05),
    dict(delta="normalized", loss="unclipped", kl=0.2, kl_period=2),
    dict(delta="loo", loss="clipped", kl=0.5, kl_period=0),
    dict(delta="max", loss="naive", reward="distance", lr=1e-2, group_size=4),
    dict(delta="centered", loss="clipped", init_scale=0.1, entropy_coef=0.05),
    dict(delta="centered", loss="clipped", optimizer="sgd", lr=0.05, kl=0.2, kl_period=0),
], ids=lambda s: "-".join(str(v) for v in s.values()))
def test_the_fast_loop_draws_the_plain_loops_samples_and_reaches_its_parameters(settings):
    """Every delta and loss mode, a refreshed and a frozen KL reference, the other reward: same samples,
    same deltas, same losses (to float rounding), same final parameters (to PARAMETER_ATOL)."""
    assert_same_run(make_task(), TrainConfig(epochs=8, steps=3, seed=3, **settings, **EXACT))


def test_the_lectures_full_run_is_the_same_in_both_loops():
    """The lecture's settings, 100 epochs x 10 steps: all 100 batches identical, parameters within 1e-5."""
    plain, fast = assert_same_run(make_task(), TrainConfig(delta="centered", **EXACT))
    assert plain.losses.shape == (100, 10) and plain.responses.shape == (100, 3, 10, 3)


def test_the_comparison_can_fail_and_the_generator_replaces_the_seed():
    """A different seed gives different samples (so equality above is not vacuous); an explicit
    generator seeded with 9 is the run of seed 9."""
    task = make_task()
    config = TrainConfig(epochs=2, steps=1, seed=5)
    by_generator = simple_train(task, config, torch.Generator().manual_seed(9))
    assert torch.equal(by_generator.responses, simple_train(task, config.replace(seed=9)).responses)
    assert not torch.equal(by_generator.responses, simple_train(task, config).responses)


@pytest.mark.parametrize("settings", [
    dict(delta="centered", loss="clipped", kl=0.3, kl_period=2, kl_estimator="k2"),
    dict(delta="loo", loss="naive", kl=0.5, kl_period=0, kl_estimator="k1", kl_in="reward"),
    dict(delta="normalized", loss="unclipped", kl=0.2, kl_period=3, kl_estimator="k3", kl_in="reward"),
], ids=lambda s: "-".join(str(v) for v in s.values()))
def test_the_kl_options_are_the_plain_loops(settings):
    """--kl-estimator and --kl-in: the fast loop (batched, fused log-probs) is the plain loop that adds
    beta * k to the loss, or makes the deltas from r - beta * sum_pos k(l_old, l_ref); with a refreshed and a
    frozen reference.

    Seed 4, not 3: a penalised reward is no longer an integer, so a baseline's deltas sum to zero only up to
    rounding, and where a parameter's exact gradient is 0 Adam can turn the two loops' different rounding residues
    into steps of opposite sign (m / (sqrt(v) + eps)); in float32 (residues of 1e-9 against eps = 1e-8) seed 3
    meets such a parameter (2e-4 apart); in float64 (residues of 1e-17) such steps stay under PARAMETER_ATOL."""
    plain, fast = assert_same_run(make_task(), TrainConfig(epochs=8, steps=3, seed=4, **settings, **EXACT))
    without = simple_train(make_task(), TrainConfig(epochs=8, steps=3, seed=4, **{**settings, "kl": 0.0}, **EXACT))
    assert not torch.equal(plain.losses, without.losses)  # the penalty changed the run
