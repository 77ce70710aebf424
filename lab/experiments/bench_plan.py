"""`lab bench`'s stages and their estimated work, for its progress (`lab.experiments.work`).

    stages = the lecture-style loop at each of its thread counts, the rows at each thread count,
             the end-to-end sweeps (one fresh process per try), the loaded row
"""

from __future__ import annotations

from collections.abc import Sequence

from lab.experiments.bench import bench_work
from lab.experiments.loaded_bench import loaded_tries
from lab.experiments.work import WORK, WorkModel, batch_work
from lab.training.config import TrainConfig


def bench_stage_works(sizes: Sequence[int], devices: Sequence[str], repeats: int, lecture_threads: Sequence[int],
                      thread_counts: int, end_to_end_runs: int, loaded_runs: int,
                      model: WorkModel = WORK) -> list[float]:
    """`lab bench`'s stages, estimated: the lecture-style loop at each of its thread counts, the rows at each
    thread count, the end-to-end sweeps (`end_to_end_runs` in all, one process per try), the loaded row."""
    one = TrainConfig()
    lecture = len(lecture_threads) * (repeats + 2 / one.epochs) * batch_work([one]) * model.lecture_loop  # + warm-up
    end_to_end = repeats * (batch_work([one.replace(seed=s) for s in range(end_to_end_runs)])
                            + model.start_s) if end_to_end_runs else 0.0
    loaded = (loaded_tries(min(repeats, 2)) * batch_work([one.replace(seed=s) for s in range(loaded_runs)])
              * model.loaded) if loaded_runs else 0.0
    return [lecture, *[bench_work(sizes, devices, repeats)] * thread_counts, end_to_end, loaded]
