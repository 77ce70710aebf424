"""How long batches of runs take, relatively: the units of progress and of its estimate of the time left.

    work(a batch of R runs, E epochs x S steps, G responses per prompt)
        = E * S * (STEP * kind.step + R * (G / LECTURE_G) * RUN_STEP * kind.run)

A batch costs a fixed amount per optimizer step (small operations whose count does not grow with R) plus
an amount per run. `lab bench` on a quiet 2-core machine, one thread, the lecture's setting (docs/speed.md):
one run alone 0.54 s for 1000 steps, 500 runs 4.5 s, so STEP ~ 0.54 ms and RUN_STEP ~ 7.9 us; the
autoregressive policy costs about 3x the first and 8x the second (one run 3.0x, 500 runs 7.7x), a learned
critic about 2.3x and 1.8x. Only ratios matter: they make a stage of a few slow runs and one of many fast
runs weigh what they take, so the time left does not jump when one gives way to the other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lab.training.config import TrainConfig


@dataclass(frozen=True)
class KindCost:
    step: float = 1.0
    """multiple of the factorised policy's fixed cost per step"""
    run: float = 1.0
    """multiple of its cost per run and step"""


@dataclass(frozen=True)
class WorkModel:
    step_s: float = 5.4e-4
    """fixed seconds per optimizer step of a batch (one run alone, lecture's setting)"""
    run_step_s: float = 7.9e-6
    """seconds per further run and step (a 500-run sweep)"""
    lecture_g: int = 10
    """the group size the figures above were measured at"""
    autoregressive: KindCost = KindCost(3.0, 7.7)
    critic: KindCost = KindCost(2.3, 1.8)
    lecture_loop: float = 1.6
    """the lecture-style loop's one run / the lab's one run (0.854 s / 0.538 s)"""
    start_s: float = 3.0
    """a fresh `lab sweep` process's seconds besides training: start-up, summary, figure, tables"""
    loaded: float = 1.5
    """a sweep beside a competing process / the same sweep alone (its tries at several thread counts)"""


WORK = WorkModel()


def batch_work(configs: Sequence[TrainConfig], model: WorkModel = WORK) -> float:
    """Estimated seconds of one batch (configs that train together: same epochs, steps and policy)."""
    first = configs[0]
    kind = model.autoregressive if first.policy.value == "autoregressive" else KindCost()
    critic = model.critic if any(c.delta.value == "gae" for c in configs) else KindCost()
    runs = sum(c.group_size for c in configs) / model.lecture_g
    return first.epochs * first.steps * (model.step_s * kind.step * critic.step
                                         + runs * model.run_step_s * kind.run * critic.run)


class Stages:
    """Progress over stages run one after another, each reporting its own `(done, total)`.

        stages = Stages(progress, [work of stage 0, work of stage 1, ...])
        run_stage_0(progress=stages(0)); run_stage_1(progress=stages(1)); ...
    The whole's progress is the finished stages' work plus the current stage's fraction of its own.
    """

    def __init__(self, progress: Callable[[float, float], None] | None, works: Sequence[float]) -> None:
        self.progress, self.works = progress, list(works)
        self.total = sum(self.works)

    def __call__(self, stage: int) -> Callable[[float, float], None] | None:
        if self.progress is None:
            return None
        offset, work = sum(self.works[:stage]), self.works[stage]
        return lambda done, total: self.progress(offset + work * done / max(total, 1e-12), self.total)


class Tally:
    """Progress over pieces of work done one after another: `add(work of the piece)` after each."""

    def __init__(self, progress: Callable[[float, float], None] | None, total: float) -> None:
        self.progress, self.total, self.done = progress, total, 0.0

    def add(self, work: float) -> None:
        self.done = min(self.done + work, self.total)
        if self.progress is not None:
            self.progress(self.done, self.total)

