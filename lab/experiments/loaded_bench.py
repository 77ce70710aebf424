"""`lab bench`'s loaded row: a sweep timed while a competing CPU-bound process runs, started and ended here.

    loaded(n)   = best seconds of an R-run sweep at n torch threads, competitor running; n = `lab sweep`'s
                  default, 1 and all cores, the tries in turn
    cost        = loaded(default) / loaded(1)      (the lab's goal: at most about 1.3)
    vs quiet    = loaded(default) / the same sweep at one thread without the competitor (the bench's row)

On a shared machine torch's OpenMP threads used to spin while they waited for each other, and a thread
that shares its core with another process made every parallel region wait: the default (all cores from
100 runs) ran 5-12x slower than one thread. The competitor is one `while True: pass` interpreter, the
simplest deterministic CPU-bound process; it is killed on every way out of the block (an error, Ctrl-C,
SIGTERM raised as an exception by the entry point) and, on Linux, by the kernel if the bench itself dies
(PR_SET_PDEATHSIG). A benchmark, not a test: it reports, it asserts nothing.
"""

from __future__ import annotations

import ctypes
import math
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

LOADED_RUNS = 500
"""Runs of the loaded sweep: the size at which the issue measured the collapse."""
BUSY_LOOP = "while True: pass"
"""The competitor's whole program."""
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before it runs: the kernel sends it SIGKILL when the bench's process ends (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the `finally` below still ends it
        pass


@contextmanager
def competing_process() -> Iterator[subprocess.Popen]:
    """A CPU-bound process for the length of the block, then killed and reaped whatever ends the block."""
    competitor = subprocess.Popen([sys.executable, "-c", BUSY_LOOP], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    try:
        yield competitor
    finally:
        competitor.kill()
        competitor.wait()


@dataclass(frozen=True)
class LoadedRow:
    runs: int
    default_threads: int
    """the threads `lab sweep` uses"""
    seconds: dict[int, float]
    """threads -> best seconds, competitor running"""

    @property
    def cost(self) -> float:
        return self.seconds[self.default_threads] / self.seconds[1]


def thread_counts() -> tuple[int, ...]:
    """The loaded row's thread counts: `lab sweep`'s default, one, all cores (each once)."""
    from lab.experiments.bench import ALL_CORES, sweep_threads

    return tuple(dict.fromkeys((sweep_threads(LOADED_RUNS), 1, ALL_CORES)))


def loaded_tries(repeats: int) -> int:
    return repeats * len(thread_counts())


def loaded_row(runs: int = LOADED_RUNS, repeats: int = 2, config=None, progress=None) -> LoadedRow:
    """Time an R-run sweep at the default threads, at one thread and at all cores, in turn, beside a competitor."""
    import torch

    from lab.experiments.bench import sweep_threads
    from lab.training.config import TrainConfig
    from lab.training.train import train
    from tasks.catalog import default_task

    config, task = config or TrainConfig(), default_task()
    configs = [config.replace(seed=s) for s in range(runs)]
    default, previous = sweep_threads(runs), torch.get_num_threads()
    counts = thread_counts()
    best, tries = dict.fromkeys(counts, math.inf), [count for _ in range(repeats) for count in counts]
    try:
        with competing_process():
            for done, count in enumerate(tries, 1):
                torch.set_num_threads(count)
                start = time.perf_counter()
                train(task, configs)
                best[count] = min(best[count], time.perf_counter() - start)
                if progress is not None:
                    progress(done, len(tries))
    finally:
        torch.set_num_threads(previous)
    return LoadedRow(runs, default, best)


def loaded_report(row: LoadedRow, quiet_seconds: float | None = None) -> str:
    """One line: the loaded times, the default's cost against the goal, and against a quiet machine."""
    times = ", ".join(f"{seconds:.2f} s at {count} thread{'s' * (count > 1)}" for count, seconds in row.seconds.items())
    quiet = ("" if quiet_seconds is None else f"; {row.seconds[row.default_threads] / quiet_seconds:.2f}x "
             "the same sweep at one thread without it")
    return (f"loaded: a {row.runs}-run sweep beside one competing CPU-bound process: {times}; lab sweep's "
            f"default ({row.default_threads}) costs {row.cost:.2f}x one thread (goal: at most about 1.3x){quiet}")
