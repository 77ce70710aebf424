"""Progress on stderr: a bar where someone watches a terminal, one line per 10% elsewhere.

    terminal:      typer's bar, updated every epoch
    not terminal:  nothing for a short job; past `quiet_s` seconds, a line at every 10% and at least
                   every `every_s` seconds ("training: 30% (30/100 epochs), 12 s, about 28 s left")
    --quiet:       nothing
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import typer


class LineProgress:
    """The progress callback `(done, total)` for logs and pipes (no terminal control characters)."""

    def __init__(self, label: str, unit: str = "epochs", quiet_s: float = 5.0, every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, file=None) -> None:
        self.label, self.unit, self.quiet_s, self.every_s, self.clock = label, unit, quiet_s, every_s, clock
        self.file = file or sys.stderr
        self.start = clock()
        self.last_tenth, self.last_line = 0, self.start

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        tenth = 10 * done // max(total, 1)
        new_tenth, overdue = tenth > self.last_tenth, now - self.last_line >= self.every_s
        self.last_tenth = max(self.last_tenth, tenth)
        if now - self.start < self.quiet_s or not (new_tenth or overdue):
            return
        elapsed = now - self.start
        left = elapsed * (total - done) / done if done else float("nan")
        print(f"{self.label}: {done / total:.0%} ({done}/{total} {self.unit}), {elapsed:.0f} s, "
              f"about {left:.0f} s left", file=self.file, flush=True)
        self.last_line = now


def run_with_progress(quiet: bool, label: str, total: int, fn):
    """Call fn(progress) with a callback that reports on stderr (none when quiet)."""
    if quiet:
        return fn(None)
    if not sys.stderr.isatty():
        return fn(LineProgress(label))
    with typer.progressbar(length=total, label=label, file=sys.stderr, show_eta=True) as bar:
        return fn(lambda done, _total: bar.update(done - bar.pos))
