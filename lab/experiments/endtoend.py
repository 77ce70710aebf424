"""`lab bench`'s end-to-end row: a real `lab sweep` in a fresh process, timed, and its folder measured.

    seconds             = wall time of `lab sweep --seeds R --out <temporary folder>`, start-up to exit
    x lecture loop      = R * seconds(one lecture-style run) / seconds
    folder size         = sum of the sizes of the files the sweep wrote

Everything a user waits for counts: Python and torch starting, training, the
summary, the figure and writing the metrics tables. The sweep runs with
`lab sweep`'s own thread policy (`lab.experiments.bench.sweep_threads`), or `lab bench --threads`'s
counts, on the lecture's setting. A benchmark, not a test: it reports, it asserts nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

END_TO_END_RUNS = 1000
"""Runs in the timed sweep (the issue's goal: >= 75x the lecture-style loop's one-run time, folder < 100 MB)."""

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # lab/experiments/endtoend.py -> the repository


@dataclass(frozen=True)
class EndToEndRow:
    device: str
    runs: int
    seconds: float
    """best wall time of the whole command"""
    folder_bytes: int
    files: dict[str, int]
    """file name -> bytes, of the sweep's folder"""

    def speedup_vs_lecture(self, lecture_seconds_per_run: float) -> float:
        return self.runs * lecture_seconds_per_run / self.seconds


def sweep_command(runs: int, out: Path, device: str = "cpu", extra: Sequence[str] = ()) -> list[str]:
    """The command line timed: `lab sweep` in a fresh interpreter running this checkout's lab."""
    return [sys.executable, "-c", "from lab.cli.main import main; main()", "sweep", "--seeds", str(runs),
            "--out", str(out), "--device", device, "--quiet", *extra]


def folder_sizes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(Path(folder).iterdir()) if p.is_file()}


def end_to_end(runs: int = END_TO_END_RUNS, device: str = "cpu", repeats: int = 2,
               extra: Sequence[str] = (), progress=None) -> EndToEndRow:
    """Best of `repeats` timings of a `runs`-run sweep into a temporary folder (removed afterwards);
    `progress(tries done, repeats)` after each."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT),
                                                                      os.environ.get("PYTHONPATH")]))}
    best, files = float("inf"), {}
    with tempfile.TemporaryDirectory(prefix="lab-bench-") as parent:
        for attempt in range(repeats):
            out = Path(parent) / f"sweep{attempt}"
            start = time.perf_counter()
            done = subprocess.run(sweep_command(runs, out, device, extra), env=env, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            if done.returncode != 0:
                raise RuntimeError(f"lab sweep failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
            best, files = min(best, seconds), folder_sizes(out)
            if progress is not None:
                progress(attempt + 1, repeats)
    return EndToEndRow(device, runs, best, sum(files.values()), files)


def end_to_end_report(row: EndToEndRow, lecture_seconds_per_run: float, threads: int | None = None) -> str:
    """One line per row: the command's seconds, its ratio to the lecture-style loop and the folder size."""
    largest = max(row.files, key=row.files.get)
    count = "its default threads" if threads is None else f"--threads {threads}"
    return (f"lab sweep end to end ({row.runs} runs on {row.device}, {count}, a fresh process: start-up, training, "
            f"writing): {row.seconds:.2f} s, {row.runs / row.seconds:.1f} runs/s, "
            f"{row.speedup_vs_lecture(lecture_seconds_per_run):.1f}x the lecture loop; folder "
            f"{row.folder_bytes / 1e6:.1f} MB (largest: {largest}, {row.files[largest] / 1e6:.1f} MB)")
