"""`lab bench`: throughput of batched sweeps against one run at a time and against the lecture's loop.

    runs/s(R)                 = R / seconds of one batched train() call with R runs
    speed-up vs one at a time = R * seconds(one run alone) / seconds(R runs batched)
    speed-up vs lecture loop  = R * seconds(one lecture-loop run) / seconds(R runs batched)

All runs use the lecture's setting (100 epochs x 10 steps, G = 10, lr 1e-3,
inclusion-ordering, naive loss) with seeds 0..R-1. "One at a time" is the
measured mean time of a single run alone, times R (running 500 runs one by one
would take minutes and measure the same thing). torch's CPU thread count is set
explicitly (one thread by default: the tensors are tiny, so threads only add
synchronisation) and restored afterwards. A benchmark, not a test: it reports,
it asserts nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from lab.config import TrainConfig
from lab.lecture_loop import lecture_train
from lab.train import train
from tasks.sorting import make_task

SIZES = (1, 10, 100, 500)
"""Sweep sizes R timed by default."""


@dataclass(frozen=True)
class BenchRow:
    device: str
    runs: int
    seconds: float
    runs_per_second: float
    speedup_vs_one_at_a_time: float
    speedup_vs_lecture: float


@dataclass
class BenchResult:
    threads: int
    config: TrainConfig
    lecture_seconds_per_run: float
    single_run_seconds: dict[str, float]
    """device -> mean seconds of one run alone"""
    rows: list[BenchRow] = field(default_factory=list)


def _timed(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def bench(sizes: Sequence[int] = SIZES, devices: Sequence[str] = ("cpu",), threads: int = 1,
          repeats: int = 3, config: TrainConfig | None = None) -> BenchResult:
    """Time the lecture loop, one run alone and sweeps of each size on each device; see the module docstring.

    `repeats` single runs (lecture loop and lab) are averaged; each sweep is timed once after a warm-up.
    """
    config = config or TrainConfig()
    task = make_task()
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        warm = config.replace(epochs=2)
        lecture_train(warm)
        lecture = sum(_timed(lambda s=s: lecture_train(config.replace(seed=s)), torch.device("cpu"))
                      for s in range(repeats)) / repeats
        result = BenchResult(threads, config, lecture, {})
        for name in devices:
            device = torch.device(name)
            train(task, [warm.replace(seed=s) for s in range(max(sizes))], device=device)  # warm-up
            single = sum(_timed(lambda s=s: train(task, config.replace(seed=s), device=device), device)
                         for s in range(repeats)) / repeats
            result.single_run_seconds[name] = single
            for runs in sizes:
                configs = [config.replace(seed=s) for s in range(runs)]
                seconds = _timed(lambda: train(task, configs, device=device), device)
                result.rows.append(BenchRow(name, runs, seconds, runs / seconds, runs * single / seconds,
                                            runs * lecture / seconds))
        return result
    finally:
        torch.set_num_threads(previous_threads)


def bench_report(result: BenchResult) -> str:
    """The printed report: settings, thread count, the baselines and one line per (device, R)."""
    c = result.config
    lines = [
        f"lecture setting: {c.epochs} epochs x {c.steps} steps, G = {c.group_size}, lr {c.lr:g}, "
        f"{c.reward}, {c.delta.value} deltas, {c.loss.value} loss",
        f"torch {torch.__version__}, torch.set_num_threads({result.threads}) (tiny tensors: one thread is fastest)",
        f"lecture-style loop (lab.lecture_loop), one run: {result.lecture_seconds_per_run:.3f} s "
        f"({1 / result.lecture_seconds_per_run:.2f} runs/s)",
    ]
    for device, seconds in result.single_run_seconds.items():
        lines.append(f"lab, one run alone on {device}: {seconds:.3f} s "
                     f"({result.lecture_seconds_per_run / seconds:.2f}x the lecture loop)")
    header = ("device", "R", "seconds", "runs/s", "x one-at-a-time", "x lecture loop")
    table = [header] + [(r.device, str(r.runs), f"{r.seconds:.3f}", f"{r.runs_per_second:.1f}",
                         f"{r.speedup_vs_one_at_a_time:.1f}", f"{r.speedup_vs_lecture:.1f}") for r in result.rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in table]
    return "\n".join(lines)
