"""Progress on stderr: a bar where someone watches a terminal, one line per 10% elsewhere.

    terminal:      typer's bar, updated every epoch
    not terminal:  nothing for a short job; past `quiet_s` seconds, a line at every 10% and at least
                   every `every_s` seconds ("training: 30% (30/100 epochs), 12 s, about 28 s left"),
                   the last from a timer where the job itself is between reports (writing figures); a first
                   report of 0 done marks where the work starts (`lab trl`: after loading TRL), and the
                   line then shows that time apart ("12 s, 3 s of training") and takes the time left from it
    --quiet:       nothing

Callers report `(done, total)` in units proportional to the time the work takes (epochs of one run;
`lab.experiments.work` for batches and stages that differ), so the time left, elapsed * (total - done)
/ done, holds still. What is shown never goes back: a report below an earlier one shows the earlier.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import typer

BAR_STEPS = 1000
"""The terminal bar's resolution: work units of any size are shown as thousandths."""


class LineProgress:
    """The progress callback `(done, total)` for logs and pipes (no terminal control characters)."""

    def __init__(self, label: str, unit: str | None = "epochs", quiet_s: float = 5.0, every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, file=None) -> None:
        self.label, self.unit, self.quiet_s, self.every_s, self.clock = label, unit, quiet_s, every_s, clock
        self.file = file or sys.stderr
        self.start = clock()
        self.last_tenth, self.last_line, self.done, self.total = 0, self.start, 0, 1
        self.work_start: float | None = None
        """when a first report of 0 done came (the work's own start), else None"""
        self.lock = threading.Lock()

    def __call__(self, done: float, total: float) -> None:
        with self.lock:
            now = self.clock()
            if done == 0 and self.done == 0 and self.work_start is None:
                self.work_start = now
            self.done, self.total = max(self.done * total / self.total, done), total  # never backwards
            tenth = int(10 * self.done // max(total, 1e-12))
            new_tenth, overdue = tenth > self.last_tenth, now - self.last_line >= self.every_s
            self.last_tenth = max(self.last_tenth, tenth)
            if now - self.start >= self.quiet_s and (new_tenth or overdue):
                self._line(now)

    def heartbeat(self) -> None:
        """A line if none came for `every_s` seconds (called by a timer while the job works)."""
        with self.lock:
            now = self.clock()
            if now - self.start >= self.quiet_s and now - self.last_line >= self.every_s:
                self._line(now)

    def _line(self, now: float) -> None:
        done, total, elapsed = self.done, self.total, now - self.start
        working = elapsed if self.work_start is None else now - self.work_start
        left = f"about {working * (total - done) / done:.0f} s left" if done else "time left not known yet"
        count = f" ({done:.0f}/{total:.0f} {self.unit})" if self.unit else ""
        own = "" if self.work_start is None else f", {working:.1f} s of {'training' if self.unit == 'epochs' else 'work'}"
        print(f"{self.label}: {done / total:.0%}{count}, {elapsed:.0f} s{own}, {left}", file=self.file, flush=True)
        self.last_line = now


class Heartbeat:
    """A daemon timer calling `progress.heartbeat()` every second for the length of a `with` block."""

    def __init__(self, progress: LineProgress, period_s: float = 1.0) -> None:
        self.progress, self.period_s, self.stopped = progress, period_s, threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self.stopped.wait(self.period_s):
            self.progress.heartbeat()

    def __enter__(self) -> LineProgress:
        self.thread.start()
        return self.progress

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join()


def run_with_progress(quiet: bool, label: str, total: float, fn, unit: str | None = "epochs"):
    """Call fn(progress) with a callback that reports on stderr (none when quiet)."""
    if quiet:
        return fn(None)
    if not sys.stderr.isatty():
        with Heartbeat(LineProgress(label, unit)) as progress:
            return fn(progress)
    with typer.progressbar(length=BAR_STEPS, label=label, file=sys.stderr, show_eta=True) as bar:
        def show(done: float, of: float) -> None:
            bar.update(max(0, int(BAR_STEPS * done / max(of, 1e-12)) - bar.pos))
        return fn(show)
