"""lab.exact.flow.descend: a row that stalls is reported as stopped, not converged, and a small gradient is not
a small distance to the minimiser (so claims that read `converged` read a stationarity test, nothing more)."""

import math

import torch

from lab.exact.flow import FlowConfig, descend

KINK = math.sqrt(2) / 5


def test_a_row_that_stalls_is_not_reported_converged():
    """L(x) = 1 + |x - k| beside L(x) = (x - k)^2, k = sqrt(2) / 5 (off the Euler steps' grid: none lands on it).
    The first has |grad L| = 1 everywhere and a minimum of 1, so no tolerance can hold; its steps halve at the kink until they are shorter than `min_step`, and the flow stops it
    there unconverged, while the smooth row converges. Mutant: `converged = reached(...) | (step < min_step)` (a
    stalled row reported as converged) fails."""
    def loss(theta):
        x = theta[..., 0]
        return torch.stack([1 + (x[0] - KINK).abs(), (x[1] - KINK) ** 2])

    flow = descend(loss, torch.zeros(2, 1, dtype=torch.float64), FlowConfig(loss_tolerance=1e-12, max_steps=10_000))
    assert flow.steps < 10_000  # every row stopped before the step limit: the first by stalling
    assert flow.converged.tolist() == [False, True]
    assert abs(float(flow.theta[0, 0]) - KINK) < 1e-6 and float(flow.grad_norm[0]) == 1.0


def test_a_small_gradient_is_not_a_small_distance_to_the_minimiser():
    """L(x) = exp(-x) has no finite minimiser; `descend` stops it `converged` once |grad L| <= 1e-6, at x = log 1e6
    ~ 13.8, however far the infimum lies (as on offline Bradley-Terry DPO, where the issue measured |grad L| 4.4e-6
    with KL(end || pi*) still 15.5). Converged here means stationary to the tolerance; a distance needs the
    expected-update flow's path criterion (lab.exact.update_flow). Mutant: a grad criterion read as a distance
    (x within 1e-3 of a minimiser) has no minimiser to compare with: the row ends near 13.8 whatever the tolerance."""
    flow = descend(lambda t: torch.exp(-t[..., 0]), torch.zeros(1, 1, dtype=torch.float64),
                   FlowConfig(grad_tolerance=1e-6, loss_tolerance=0.0))
    assert bool(flow.converged.all()) and abs(float(flow.theta[0, 0]) - math.log(1e6)) < 0.05
