"""Output folders the lab owns: written whole or not at all, replaced only where the lab wrote them.

    OUT/.lab-output = {"written_by": "grpo-sorting-lab", "command": ..., "files": {name: sha256}}
    replace OUT  <=>  OUT carries that marker, holds no file outside it, every file still has the
                      hash the lab wrote, OUT is no link, and OUT is not the working folder or above it

A folder is built under a temporary name beside its destination (`.OUT.XXXX.partial`, marked with
the writer's pid) and renamed into place only when complete; the folder it replaces is renamed
aside first and deleted last, so an interrupt never leaves neither. A partial folder whose writer
is gone (killed, power lost) is the lab's own and is removed by the next write into that parent.
`lab reproduce` writes into an existing folder such as `figures/`: `OutputFiles` replaces only
the files its marker lists, unchanged since the lab wrote them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

MARKER = ".lab-output"
"""The file inside every folder the lab writes: which command wrote it, and each file's sha256."""
WRITER = "grpo-sorting-lab"
TEMP_SUFFIXES = (".partial", ".old")
"""Our temporary folders beside a destination: one being built, one being replaced."""


class OutputError(FileExistsError):
    """An output path the lab refuses to write (a user's folder, a file, the working folder)."""


def _umask_mode(full: int) -> int:
    """`full` (0o666 for files, 0o777 for folders) less the process umask, as open() and mkdir() apply it."""
    umask = os.umask(0)
    os.umask(umask)
    return full & ~umask


@contextmanager
def atomic_path(path: Path):
    """A temporary path beside `path` to write to; renamed over `path` when the block succeeds,
    removed when it fails, so `path` never holds a half-written file.

        with atomic_path(out) as tmp:
            fig.savefig(tmp, format="png")
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        os.chmod(tmp, _umask_mode(0o666))  # mkstemp makes 0600; the result is an ordinary file
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename over it."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json_atomic(path: Path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_marker(folder: Path) -> dict | None:
    """The folder's marker, or None when it has none (or one the lab could not have written)."""
    try:
        marker = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(marker, dict) and marker.get("written_by") == WRITER
    return marker if ok and isinstance(marker.get("files", {}), dict) else None


def write_marker(folder: Path, command: str, files: list[str] | None = None, **extra) -> None:
    """Mark `folder` as the lab's; `files` (names inside it) are hashed as they are now."""
    folder = Path(folder)
    hashes = {name: sha256(folder / name) for name in sorted(files or [])}
    write_json_atomic(folder / MARKER, {"written_by": WRITER, "command": command, **extra, "files": hashes})


def check_not_working_folder(out: Path, flag: str = "--out") -> None:
    """Refuse `.` and every folder above it: replacing one would delete the user's work."""
    target, here = Path(out).resolve(), Path.cwd().resolve()
    if target == here or target in here.parents:
        raise OutputError(f"{flag} {out} is the working folder or one above it; the lab never replaces "
                          f"it: choose a new folder, e.g. {flag} runs/NAME")


def foreign_files(folder: Path, marker: dict | None) -> list[str]:
    """Files in `folder` that the marker does not vouch for: unlisted, or changed since the lab wrote them."""
    listed = (marker or {}).get("files", {})
    names = sorted(p.name for p in Path(folder).iterdir() if p.name != MARKER)
    return [n for n in names if n not in listed or not (Path(folder) / n).is_file()
            or sha256(Path(folder) / n) != listed[n]]


def check_replaceable(out: Path, force: bool, flag: str = "--out") -> None:
    """Raise `OutputError` unless `out` is free, or `force` is set and `out` is a lab folder intact."""
    out = Path(out)
    if out.is_symlink():
        raise OutputError(f"{flag} {out} is a link; name a folder (the lab does not write through links)")
    if not out.exists():
        return
    if not out.is_dir():  # --force replaces run folders, never other files
        raise OutputError(f"{out} exists and is not a folder; choose another {flag}")
    if not force:
        raise OutputError(f"output folder {out} already exists; pass --force to replace it "
                          f"or {flag} to choose another")
    check_not_working_folder(out, flag)
    marker = read_marker(out)
    if marker is None:
        raise OutputError(f"{out} was not written by the lab (no {MARKER} inside), so --force does not "
                          f"replace it; move it away or choose another {flag}")
    foreign = foreign_files(out, marker)
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise OutputError(f"{out} holds files the lab did not write or that changed since ({shown}), so "
                          f"--force does not replace it; move them away or choose another {flag}")


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


def remove_stale_temporaries(parent: Path) -> None:
    """Delete the lab's own temporary folders in `parent` whose writing process is gone."""
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return
    for entry in entries:
        if not (entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIXES)) or entry.is_symlink():
            continue
        marker = read_marker(entry) if entry.is_dir() else None
        if marker is not None and not _pid_alive(marker.get("pid")):
            shutil.rmtree(entry, ignore_errors=True)


class RunFolder:
    """Build a result folder under a temporary name; it appears under its real name only when complete.

        with RunFolder(out, force, command="run") as tmp:
            (tmp / "metrics.csv").write_text(...)
    On an exception the temporary folder is removed and `out` is untouched. `--force` replaces
    only a folder the lab wrote (`check_replaceable`).
    """

    def __init__(self, out: Path, force: bool = False, command: str = "run") -> None:
        self.out, self.force, self.command = Path(out), force, command

    def check(self) -> None:
        check_replaceable(self.out, self.force)

    def __enter__(self) -> Path:
        self.check()
        self.out.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.out.parent)
        self.tmp = Path(tempfile.mkdtemp(dir=self.out.parent, prefix=f".{self.out.name}.", suffix=".partial"))
        self.tmp.chmod(_umask_mode(0o777))  # mkdtemp makes 0700; the run folder is an ordinary folder
        write_marker(self.tmp, self.command, pid=os.getpid())
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        try:
            write_marker(self.tmp, self.command, [p.name for p in self.tmp.iterdir() if p.name != MARKER])
            self.check()  # nothing changed hands while we trained
            old = None
            if self.out.exists():
                old = Path(tempfile.mkdtemp(dir=self.out.parent, prefix=f".{self.out.name}.", suffix=".old"))
                os.replace(self.out, old / self.out.name)
                write_marker(old, self.command, pid=os.getpid())
            os.replace(self.tmp, self.out)
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


class OutputFiles:
    """Write named files into an existing folder (such as `figures/`), replacing only the lab's own.

        files = OutputFiles(out, "reproduce"); files.check(names)
        with files.staging() as tmp: ...write names into tmp...
    The staged files are moved in one by one (each atomically); files the previous run listed and
    this one no longer writes are removed; anything else in the folder is left alone.
    """

    def __init__(self, out: Path, command: str) -> None:
        self.out, self.command = Path(out), command

    def check(self, names: list[str]) -> None:
        out = self.out
        if out.is_symlink() or (out.exists() and not out.is_dir()):
            raise OutputError(f"--out {out} must be a folder (not a file or a link)")
        if not out.exists():
            return
        check_not_working_folder(out)
        marker = read_marker(out)
        foreign = set(foreign_files(out, marker))
        clash = sorted(set(names) & foreign)
        if clash:
            raise OutputError(f"{out} already holds {', '.join(clash)}, which the lab did not write (or which "
                              "changed since it did); move them away or choose another --out")

    @contextmanager
    def staging(self):
        """A temporary folder inside `out` to write the files into; moved in when the block succeeds."""
        self.out.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.out)
        tmp = Path(tempfile.mkdtemp(dir=self.out, prefix=f".{self.command}.", suffix=".partial"))
        try:
            tmp.chmod(_umask_mode(0o777))
            write_marker(tmp, self.command, pid=os.getpid())
            yield tmp
            names = sorted(p.name for p in tmp.iterdir() if p.name != MARKER)
            self.check(names)
            previous = read_marker(self.out)
            changed = set(foreign_files(self.out, previous))
            for name in names:
                os.replace(tmp / name, self.out / name)
            for name in set((previous or {}).get("files", {})) - set(names) - changed:
                (self.out / name).unlink(missing_ok=True)  # the lab's own file from an earlier run
            write_marker(self.out, self.command, names)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
