"""The reproduction's sections after "Before RL", run in `lab.experiments.reproduce.run_reproduction`'s order, each on
its own progress stage:

    reward-model over-optimisation      lab.experiments.overoptimisation
    the lecture's conclusions beyond sorting   lab.experiments.beyond_sorting
    what is sampled, and from which policy     lab.experiments.sampler_results
    GRPO's descendants                  lab.experiments.descendants_results
"""

from __future__ import annotations

from collections.abc import Callable

from lab.experiments.sampler_results import run_samplers
from lab.experiments.sweep import run_sweep
from lab.training.config import TrainConfig
from tasks.catalog import default_task


def later_sections(reproduction, base: TrainConfig, device, next_progress: Callable, tasks,
                   chosen: dict[str, bool]) -> None:
    """The sections after "Before RL", each on its own progress stage (in `run_reproduction`'s order): reward-model
    over-optimisation, the lecture's conclusions beyond sorting, what is sampled, GRPO's descendants."""
    from lab.experiments.beyond_sorting import run_beyond_sorting
    from lab.experiments.descendants_results import run_descendants
    from lab.experiments.overoptimisation import for_base, run_overoptimisation

    seeds = reproduction.seeds
    if chosen["overoptimisation"]:
        reproduction.overoptimisation = run_overoptimisation(default_task(), seeds, for_base(base), next_progress())
    if chosen["beyond"]:
        reproduction.beyond = run_beyond_sorting(seeds, base, device, next_progress(), tasks)
    if chosen["samplers"]:
        reproduction.samplers = run_samplers(seeds, base, run_sweep, device, next_progress())
    if chosen["descendants"]:
        reproduction.descendants = run_descendants(seeds, base, run_sweep, default_task(), device, next_progress())
