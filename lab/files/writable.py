"""Can the lab write OUT? Asked before any training, so that a bad --out costs seconds, not a run.

    OUT is writable  <=>  every existing folder on its way is a folder (not a file, also before a `..`: `f/../r`
                          with f a file cannot be made), the whole path fits PATH_MAX (4096 bytes), every name fits
                          the file system (NAME_MAX bytes; the temporary `.NAME.<pid>.XXXXXXXX.partial`
                          keeps at most `TEMP_NAME_KEEP` bytes of NAME, so it always fits too), and the
                          nearest existing folder lets us create a folder in it (tried, then removed)

What cannot be known up front (the disk filling up while writing) is caught while writing: the
output is built under a temporary name (`lab.files.output_folders`), so a failure leaves nothing partial.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from lab.files.output_folders import OutputError

TEMP_NAME_EXTRA = len(".") + len(".4194304") + len(".XXXXXXXX") + len(".partial")
"""Characters the temporary `.NAME.<pid>.XXXXXXXX.partial` adds to the first `TEMP_NAME_KEEP` bytes of NAME
(the largest Linux pid, tempfile's 8 random ones): at most 226 bytes, so any legal NAME has one."""
PROBE_PREFIX = ".lab-write-probe."


def name_max(folder: Path) -> int:
    """The longest file name `folder`'s file system allows (255 where it does not say)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def path_max(folder: Path) -> int:
    """The longest path `folder`'s file system allows (4096 where it does not say)."""
    try:
        return os.pathconf(folder, "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):
        return 4096


def nearest_existing(path: Path) -> Path:
    """`path` itself or its closest ancestor that exists (following `..` lexically, as mkdir would)."""
    path = Path(os.path.abspath(path))
    while not os.path.lexists(path):
        path = path.parent
    return path


def check_writable(out: Path, flag: str = "--out", temporary: bool = True) -> None:
    """Raise `OutputError` (one line) when `out` cannot be created; nothing is left behind.

    `temporary`: kept for callers; the temporary names need no room of their own (`TEMP_NAME_EXTRA`).
    """
    out = Path(out)
    shown = str(out) if len(str(out)) <= 80 else f"{str(out)[:60]}..."
    absolute = Path(os.path.abspath(out))
    for above in reversed(out.parents):  # as typed: `f/../r` needs f to be a folder, though abspath drops it
        if os.path.lexists(above) and not os.path.isdir(above):
            raise OutputError(f"{flag} {shown}: {above} is a file, not a folder; choose a path inside a folder")
    existing = nearest_existing(absolute.parent)
    if not existing.is_dir():
        raise OutputError(f"{flag} {shown}: {existing} is a file, not a folder; choose a path inside a folder")
    longest = path_max(existing)
    if len(os.fsencode(absolute)) >= longest:
        raise OutputError(f"{flag}: the path is {len(os.fsencode(absolute))} bytes long, more than the {longest - 1} "
                          "this file system allows; choose a shorter path")
    limit = name_max(existing)
    missing = absolute.relative_to(existing).parts
    for name in missing:
        if len(os.fsencode(name)) > limit:
            raise OutputError(f"{flag} {shown}: the name {name[:20]}... is {len(os.fsencode(name))} bytes long, "
                              f"more than the {limit} this file system allows; choose a shorter name")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {shown}: cannot write into {existing} (permission denied); "
                          "choose a folder you can write to")
    try:  # what access() cannot see: a read-only file system, quotas, ACLs
        os.rmdir(tempfile.mkdtemp(dir=existing, prefix=PROBE_PREFIX))
    except OSError as e:
        raise OutputError(f"{flag} {shown}: cannot write into {existing} ({e.strerror}); "
                          "choose a folder you can write to") from None
