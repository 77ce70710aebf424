"""lab.training.optim: plain SGD steps by the gradient, per run; Adam's first step ignores the gradient's scale.

Why the Before RL section's clipping verdict needs SGD (issue 35): clipping a gradient's norm rescales it, and
Adam's first step, lr m / sqrt(v) with m = (1 - b1) g, v = (1 - b2) g^2 bias-corrected, is lr sign(g) whatever
the scale (Kingma and Ba 2015, arXiv:1412.6980, section 2.1: the step is invariant to rescaling the gradient), so
clipping cannot shorten it; SGD's step is lr g and clipping bounds it."""

import torch

from lab.training.config import TrainConfig
from lab.training.optim import OPTIMIZERS, RunAdam, RunSGD
from lab.training.train import train
from tasks.sorting import make_task


def _step(optimizer_class, grad: torch.Tensor, lr: torch.Tensor) -> torch.Tensor:
    """One step of a per-run optimizer on parameters float[run 3] at 1 with gradient `grad`: the new parameters."""
    param = torch.ones(2, 3, dtype=torch.float64, requires_grad=True)
    optimizer = optimizer_class([param], lr)
    param.grad = grad.clone()
    optimizer.step()
    return param.detach().clone()


def test_sgd_steps_each_run_by_its_own_lr_times_the_gradient():
    """theta - lr_r g, per run, exactly in float64. Mutant: one lr for every run (lr[0]) fails the second run."""
    grad, lr = torch.tensor([[0.5, -2.0, 4.0], [1.0, 3.0, -0.25]], dtype=torch.float64), torch.tensor([0.1, 0.02],
                                                                                                       dtype=torch.float64)
    torch.testing.assert_close(_step(RunSGD, grad, lr), 1 - lr[:, None] * grad, rtol=0, atol=1e-15)
    assert OPTIMIZERS[TrainConfig(optimizer="sgd").optimizer] is RunSGD


def test_adams_first_step_ignores_the_gradients_scale_where_sgds_scales_with_it():
    """Scaling a gradient by 1000 (what clipping undoes) leaves Adam's first step at lr sign(g) (to eps / |g|), and
    multiplies SGD's by 1000. Mutant: RunSGD built on Adam's update fails the second check."""
    grad, lr = torch.tensor([[0.5, -2.0, 4.0], [1.0, 3.0, -0.25]], dtype=torch.float64), torch.full((2,), 0.1,
                                                                                                      dtype=torch.float64)
    small, large = (_step(RunAdam, scale * grad, lr) for scale in (1.0, 1000.0))
    torch.testing.assert_close(small, 1 - 0.1 * grad.sign(), rtol=0, atol=1e-8)
    torch.testing.assert_close(large, small, rtol=0, atol=1e-8)
    assert torch.allclose(1 - _step(RunSGD, 1000 * grad, lr), 1000 * (1 - _step(RunSGD, grad, lr)), rtol=1e-12)


def test_the_optimizer_setting_changes_the_run():
    """The same config under SGD and Adam ends at different parameters (the setting reaches the loop; the fast loop
    against the plain torch.optim.SGD loop: tests/training/test_simple_loop.py)."""
    config = TrainConfig(epochs=2, steps=2, delta="centered", lr=0.05)
    adam, sgd = (train(make_task(), config.replace(optimizer=o)).state["embedding"] for o in ("adam", "sgd"))
    assert not torch.allclose(adam, sgd)
