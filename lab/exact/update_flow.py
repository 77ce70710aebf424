"""Where a method goes: its exact expected-update flow in the tabular class, integrated to a stated tolerance.

    d theta / d tau = v(theta)      (lab.exact.expected_update: the expected update in natural coordinates)
    size(v) = max_y v(y) - min_y v(y)      the fastest rate at which any log pi(a) / pi(b) changes

From theta = log pi_ref, per prompt (rows side by side, each with its own step), by explicit Euler steps whose
length h is set so that one step changes the update by at most a fraction of itself, size(v(theta + h v) -
v(theta)) <= `change_tolerance` x size(v(theta)) (a rejected step is retried shorter, an accepted one lets the
next grow up to twofold): the local error is that fraction of the step, and the stiff directions never make Euler
unstable. A row stops `converged` when size(v) <= `update_tolerance` and the path left at v's current decay rate
is below `distance_tolerance`. A row that reaches `max_time` or `max_steps` first is still moving, reported with
the direction of its KL to pi_ref since size(v) fell tenfold the time before last (`still moving (KL rising)`
where the method has no finite fixed point and the losers' mass keeps falling). Deterministic: no sampling.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lab.exact.expected_update import Method, Problem, natural_update


@dataclass(frozen=True)
class UpdateFlowConfig:
    """How far the flow runs and how finely (module docstring)."""

    update_tolerance: float = 1e-8
    """converged needs size(v) <= this: no log-ratio of two responses moves faster, per unit flow time"""
    distance_tolerance: float = 1e-6
    """and the path left, size(v) / its current decay rate, at most this (in logits): a flow whose update decays
    only like 1 / time (DPO under argmax preferences) moves without bound and never passes it"""
    change_tolerance: float = 0.25
    """a step is accepted when it changes the update by at most this fraction, size(v(theta + h v) - v) <= this x
    size(v): along a direction where v decays at rate lambda, h <= 2 x this / lambda, inside Euler's stability"""
    first_step: float = 1e-2
    """the first step's length in flow time"""
    max_steps: int = 20_000
    """steps (accepted or not) at most"""
    max_time: float = 1e8
    """flow time at most"""


CONVERGED, RISING, FALLING = "converged", "still moving (KL rising)", "still moving (KL falling)"
FLAT = "still moving (KL unchanged to float64 rounding)"
"""Outcomes. FLAT: the losers' mass has fallen below KL's rounding (DPO under argmax preferences, its KL at
-log pi_ref(y) of the response it collapsed onto)."""


@dataclass(frozen=True)
class UpdateFlow:
    """Where the flow stopped, per row."""

    log_probs: Tensor
    """float64[... n] there"""
    update_size: Tensor
    """float64[...]: size(v) there"""
    time: Tensor
    """float64[...]: flow time reached"""
    kl_trend: Tensor
    """float64[...]: KL(pi || pi_ref) there minus where size(v) fell tenfold the time before last (or the start)"""
    steps: int
    converged: Tensor
    """bool[...]"""

    def outcome(self) -> list[str]:
        """Each row's `CONVERGED`, `RISING`, `FALLING` or `FLAT`, rows flattened."""
        return [CONVERGED if c else RISING if t > 0 else FALLING if t < 0 else FLAT
                for c, t in zip(self.converged.flatten().tolist(), self.kl_trend.flatten().tolist())]


def _size(v: Tensor) -> Tensor:
    return v.amax(-1) - v.amin(-1)


def _kl_to_ref(theta: Tensor, ref_log_probs: Tensor) -> Tensor:
    log_probs = torch.log_softmax(theta, -1)
    return (log_probs.exp() * (log_probs - ref_log_probs)).sum(-1)


def follow(method: Method, problem: Problem, config: UpdateFlowConfig = UpdateFlowConfig()) -> UpdateFlow:
    """The flow of `method`'s expected update from pi_ref (module docstring), every row until it stops."""
    theta = problem.ref_log_probs.clone()
    v = natural_update(method, theta, problem)
    size = _size(v)
    h = torch.full(size.shape, config.first_step, dtype=theta.dtype)
    time, rate = torch.zeros_like(h), torch.zeros_like(h)
    mark_size, mark_time = size.clone(), time.clone()  # where size(v) last fell tenfold
    kl_mark = kl_before = _kl_to_ref(theta, problem.ref_log_probs)  # KL at the last two tenfold falls

    def converged(size: Tensor) -> Tensor:
        return (size <= config.update_tolerance) & (size <= config.distance_tolerance * rate)

    done, steps = converged(size), 0
    while steps < config.max_steps and not bool(done.all()):
        trial = theta + torch.where(done, 0.0, h).unsqueeze(-1) * v
        v_trial = natural_update(method, trial, problem)
        change = _size(v_trial - v) / size  # how much of the update one step changes
        accept = (change <= config.change_tolerance) & ~done
        theta = torch.where(accept.unsqueeze(-1), trial, theta)
        v = torch.where(accept.unsqueeze(-1), v_trial, v)
        time = time + torch.where(accept, h, 0.0)
        size = _size(v)
        tenfold = accept & (size <= mark_size / 10)
        rate = torch.where(tenfold, (mark_size / size).log() / (time - mark_time), rate)
        mark_size, mark_time = torch.where(tenfold, size, mark_size), torch.where(tenfold, time, mark_time)
        if bool(tenfold.any()):
            kl_before = torch.where(tenfold, kl_mark, kl_before)
            kl_mark = torch.where(tenfold, _kl_to_ref(theta, problem.ref_log_probs), kl_mark)
        factor = (0.9 * config.change_tolerance / change.clamp_min(1e-300)).nan_to_num(0.1).clamp(0.1, 2.0)
        h = torch.where(done, h, (h * factor).clamp_max(config.max_time))
        done = done | converged(size) | (time >= config.max_time)
        steps += 1
    if not bool(torch.isfinite(theta).all()):
        raise FloatingPointError(f"the expected-update flow of {method} left float64's range")
    trend = _kl_to_ref(theta, problem.ref_log_probs) - kl_before
    return UpdateFlow(torch.log_softmax(theta, -1), size, time, trend, steps, converged(size))
