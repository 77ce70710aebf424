"""This process's temporary files and folders: named after it, removed by it, never anyone else's.

    .NAME.<pid>.XXXXXXXX.partial   a folder being built (`lab.files.output_folders.RunFolder`, `OutputFiles`)
    .NAME.<pid>.XXXXXXXX.old       the previous folder while `--force` replaces it
    .NAME.<pid>.XXXXXXXX.tmp       a file being written (`atomic_path`)

Only the process whose pid a name carries deletes it, on every exit path: SIGINT and SIGTERM are
held back while a temporary is created, swapped in or removed, and delivered right after. The
lab never scans for other folders to delete; a temporary whose process is gone (SIGKILL, power
loss) is reported with its path (`warn_stale`) and left for the user, who may need what is in it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

TEMP_NAME_KEEP = 200
"""Bytes of NAME kept in a temporary name (`.NAME.<pid>.XXXXXXXX.partial` stays under 255 bytes)."""


@contextmanager
def signals_held():
    """Hold SIGINT and SIGTERM back (each handled on leaving) so a swap or a clean-up is never cut in half.

    Python runs signal handlers in the main thread whichever thread the kernel picked (torch's
    threads do not block signals), so the handlers are swapped, not the thread's signal mask."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {number: signal.signal(number, lambda signum, frame: pending.append(signum)) for number in held}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for number in pending[:1]:  # the first one decides, as it would have without the hold
            handler = previous[number]
            if callable(handler):
                handler(number, None)  # raises KeyboardInterrupt, or lab.cli.signals' Terminated
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), number)


def _umask_mode(full: int) -> int:
    """`full` (0o666 for files, 0o777 for folders) less the process umask, as open() and mkdir() apply it."""
    umask = os.umask(0)
    os.umask(umask)
    return full & ~umask


def temp_prefix(name: str) -> str:
    """`.NAME.<pid>.`: the start of this process's temporary names for NAME (NAME cut to fit)."""
    raw = os.fsencode(name)
    short = os.fsdecode(raw[:TEMP_NAME_KEEP]) if len(raw) > TEMP_NAME_KEEP else name
    return f".{short}.{os.getpid()}."


def remove_own(path: Path) -> None:
    """Delete a temporary this process created (never called on anything else), signals held."""
    with signals_held():
        if Path(path).is_dir() and not Path(path).is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            Path(path).unlink(missing_ok=True)


@contextmanager
def atomic_path(path: Path):
    """A temporary path beside `path` to write to; renamed over `path` when the block succeeds,
    removed when it fails, so `path` never holds a half-written file.

        with atomic_path(out) as tmp:
            fig.savefig(tmp, format="png")
    """
    path = Path(path)
    tmp = None
    try:
        with signals_held():  # no interrupt between creating the file and knowing its name
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix(path.name), suffix=".tmp")
            os.close(fd)
            os.chmod(tmp, _umask_mode(0o666))  # mkstemp makes 0600; the result is an ordinary file
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            remove_own(Path(tmp))
        raise


def _pid_alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def stale_temporaries(parent: Path, name: str) -> list[Path]:
    """Temporaries of NAME in `parent` (`.NAME.<pid>.XXXXXXXX.partial|.old`) whose process is gone."""
    short = temp_prefix(name)[:-len(f"{os.getpid()}.")]
    pattern = re.compile(re.escape(short) + r"(\d+)\.[^.]+(\.partial|\.old)$")
    try:
        entries = sorted(Path(parent).iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match and int(match.group(1)) != os.getpid() and not _pid_alive(int(match.group(1))):
            found.append(entry)
    return found


def warn_stale(parent: Path, name: str) -> None:
    """One stderr line per stale temporary: the lab did not create it in this process, so never deletes it."""
    for path in stale_temporaries(parent, name):
        kind = "the previous folder being replaced" if path.name.endswith(".old") else "a folder being written"
        print(f"Warning: {path} is {kind} by a lab process that was killed; the lab leaves it alone: "
              "look inside, then move or delete it yourself", file=sys.stderr, flush=True)


def unused_name(parent: Path, name: str, suffix: str) -> Path:
    """A free name `.NAME.<pid>.XXXXXXXX<suffix>` in `parent` (for a rename: creates nothing, needs no inode)."""
    while True:
        path = Path(parent) / f"{temp_prefix(name)}{os.urandom(4).hex()}{suffix}"
        if not os.path.lexists(path):
            return path


def swap_into_place(new: Path, out: Path) -> None:
    """`new` becomes `out`; an existing `out` is renamed aside first and deleted only once `new` is in
    place. On any failure or interrupt before that the previous `out` is renamed back: it is always
    either in place or untouched."""
    new, out = Path(new), Path(out)
    backup = None
    with signals_held():
        try:
            if os.path.lexists(out):
                backup = unused_name(out.parent, out.name, ".old")
                os.replace(out, backup)
            os.replace(new, out)
        except BaseException:
            if backup is not None and not os.path.lexists(out):
                os.replace(backup, out)  # the previous run back where it was
            raise
        if backup is not None:  # still with signals held: a backup is never left behind
            remove_own(backup)




def make_folder(parent: Path, name: str, mark: Callable[[Path], None], suffix: str = ".partial") -> Path:
    """This process's own folder `.NAME.<pid>.XXXXXXXX<suffix>` in `parent` (umask permissions), `mark`ed.

    Created, opened up and marked with signals held, and removed again if anything fails, so an
    interrupt never leaves a nameless empty folder behind (an interrupt held back until the end is
    raised inside this function's `try`, where it removes the folder too)."""
    tmp = None
    try:
        with signals_held():
            tmp = Path(tempfile.mkdtemp(dir=parent, prefix=temp_prefix(name), suffix=suffix))
            tmp.chmod(_umask_mode(0o777))  # mkdtemp makes 0700; the run folder is an ordinary folder
            mark(tmp)
    except BaseException:
        if tmp is not None:
            remove_own(tmp)
        raise
    return tmp
