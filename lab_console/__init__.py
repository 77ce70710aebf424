"""The `lab` console entry point: signals first, then the heavy imports, then the app.

A package of its own, beside `lab`: importing `lab` loads torch (its `__init__` exports the
library), and an interrupt during that import could only print a traceback.

    SIGTERM  -> raised as `Terminated` (a KeyboardInterrupt) where the program is, so every
                temporary output is removed exactly as for Ctrl-C; exit 143, one line
    Ctrl-C   -> exit 130, one line ("Interrupted"), also while torch is still loading

This package imports nothing heavy, so an interrupt during start-up lands inside `main`'s
handler instead of printing an import traceback.
"""

from __future__ import annotations

import ctypes
import signal
import sys

EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered as an exception so that `finally` blocks and context managers run."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def interrupted(e: KeyboardInterrupt) -> int:
    """Print the one line for an interrupt during start-up and return its exit code (as `lab.cli.app` does)."""
    terminated = isinstance(e, Terminated)
    print("Interrupted" + (" (SIGTERM)" if terminated else ""), file=sys.stderr, flush=True)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


MMAP_THRESHOLD, TRIM_THRESHOLD = 32 << 20, 256 << 20
"""glibc malloc settings of the `lab` process (bytes): allocations below 32 MB come from the heap, and
up to 256 MB of freed heap is kept for reuse."""


def keep_freed_memory() -> None:
    """Let glibc reuse freed blocks instead of mapping fresh pages for every large tensor.

    A sweep's training loop allocates and frees the same few-MB tensors at every step; glibc serves
    blocks above its mmap threshold with fresh pages (a page fault per touched page) until that
    threshold adapts. Fixing it (and keeping freed memory) saves about 0.2 s of a 1000-run sweep.
    Only the `lab` process is tuned, never a program that imports the lab; elsewhere than glibc
    (macOS, Windows, musl) this does nothing.
    """
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # from glibc's malloc.h
    mallopt(m_mmap_threshold, MMAP_THRESHOLD)
    mallopt(m_trim_threshold, TRIM_THRESHOLD)


def main() -> None:
    signal.signal(signal.SIGTERM, _raise_terminated)
    keep_freed_memory()
    try:
        import torch

        from lab.cli import app

        torch.set_num_threads(1)  # tiny tensors: one thread beats the threading overhead
    except KeyboardInterrupt as e:
        sys.exit(interrupted(e))
    app()
