"""Output folders the lab owns: written whole or not at all; deleted only where this process made them.

    OUT/.lab-output = {"written_by": "grpo-sorting-lab", "command": ..., "files": {name: sha256}}
    replace OUT  <=>  OUT carries that marker, holds no file outside it, every file still has the
                      hash the lab wrote, OUT is no link, and OUT is not the working folder or above it
    --force:     OUT -> .OUT.<pid>.XXXX.old;  .OUT.<pid>.XXXX.partial -> OUT;  then delete the .old
                 (any failure or interrupt before the new OUT is in place renames the .old back)

A folder is built under a temporary name beside its destination whose name carries this process's
pid (`.OUT.<pid>.XXXXXXXX.partial`, NAME cut to `TEMP_NAME_KEEP` bytes so any legal NAME fits);
the process removes it on every exit path, Ctrl-C and SIGTERM included (signals are held back
while temporaries are created, swapped and removed). The lab never scans for folders to delete:
a temporary of the same NAME left by a process that is gone (SIGKILL, power loss) is reported on
stderr with its path and left alone. `lab reproduce` writes into an existing folder such as
`figures/` (`OutputFiles`): the files it replaces are moved into a backup folder of its own first
and all moved back on any failure, so the folder holds either the whole new set or the old one.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path

from lab.files.temporaries import (
    atomic_path,
    make_folder,
    remove_own,
    signals_held,
    swap_into_place,
    unused_name,
    warn_stale,
)

MARKER = ".lab-output"
"""The file inside every folder the lab writes: which command wrote it, and each file's sha256."""
WRITER = "grpo-sorting-lab"


class OutputError(FileExistsError):
    """An output path the lab refuses to write (a user's folder, a file, the working folder)."""


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


MARK_BYTES = 1 << 20
"""The largest mark the lab reads (one sha256 per file: a few hundred bytes)."""


def plain_name(name) -> bool:
    """A name of a file directly inside the folder: not empty, no `/`, not `.` or `..`, not the mark itself."""
    return isinstance(name, str) and name not in ("", ".", "..", MARKER) and "/" not in name and "\0" not in name


def marker_problem(folder: Path) -> str | None:
    """Why `folder` carries no usable marker ('no .lab-output inside', '... is not valid JSON', '... is a link',
    '... lists a path outside the folder'), or None."""
    path = Path(folder) / MARKER
    if path.is_symlink():
        return f"its {MARKER} is a link (the lab writes its mark as a file)"
    try:
        if path.stat().st_size > MARK_BYTES:
            return f"its {MARKER} is larger than any mark the lab writes"
        marker = json.loads(path.read_text())
    except FileNotFoundError:
        return f"no {MARKER} inside"
    except OSError as e:
        return f"its {MARKER} cannot be read ({e.strerror})"
    except (ValueError, RecursionError):
        return f"its {MARKER} is not valid JSON"
    if not isinstance(marker, dict) or marker.get("written_by") != WRITER:
        return f"its {MARKER} does not name the lab as writer"
    files = marker.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(digest, str) for digest in files.values()):
        return f"its {MARKER} has no valid \"files\" list"
    outside = [name for name in files if not plain_name(name)]
    if outside:
        return f"its {MARKER} lists {outside[0][:40]!r}, not a file inside the folder"
    return None


def read_marker(folder: Path) -> dict | None:
    """The folder's marker, or None when it has none (or one the lab could not have written)."""
    if marker_problem(folder) is not None:
        return None
    return json.loads((Path(folder) / MARKER).read_text())


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
    return [n for n in names if n not in listed or (Path(folder) / n).is_symlink() or not (Path(folder) / n).is_file()
            or sha256(Path(folder) / n) != listed[n]]


def missing_files(folder: Path, marker: dict | None) -> list[str]:
    """Files the marker lists that are not in `folder`: damage, so `--force` does not take the folder for the lab's."""
    return sorted(name for name in (marker or {}).get("files", {}) if not os.path.lexists(Path(folder) / name))


def check_same_command(out: Path, marker: dict | None, command: str, flag: str = "--out") -> None:
    """Refuse a folder another lab command wrote: its files are that command's, so this one never replaces them."""
    wrote = (marker or {}).get("command")
    if marker is not None and wrote != command:
        raise OutputError(f"{flag} {out} is a folder that lab {wrote} wrote; lab {command} does not write into "
                          f"it or replace it: choose another {flag}")


def check_not_inside(out: Path, flag: str = "--out") -> None:
    """Refuse a path inside a folder the lab wrote: a file added there is one the folder's marker does not vouch for."""
    parent = Path(os.path.abspath(out)).parent
    if os.path.isfile(parent / MARKER) and marker_problem(parent) is None:
        wrote = read_marker(parent).get("command")
        raise OutputError(f"{flag} {out} is inside {parent.name}/, a folder that lab {wrote} wrote; the lab does not "
                          f"add to another output: choose a path outside it")


def check_replaceable(out: Path, force: bool, flag: str = "--out", command: str = "run") -> None:
    """Raise `OutputError` unless `out` is free, or `force` is set and `out` is an intact folder of `command`."""
    out = Path(out)
    if out.is_symlink():
        raise OutputError(f"{flag} {out} is a link; name a folder (the lab does not write through links)")
    check_not_inside(out, flag)
    if not out.exists():
        return
    if not out.is_dir():  # --force replaces run folders, never other files
        raise OutputError(f"{out} exists and is not a folder; choose another {flag}")
    if not force:
        raise OutputError(f"output folder {out} already exists; pass --force to replace it "
                          f"or {flag} to choose another")
    check_not_working_folder(out, flag)
    problem = marker_problem(out)
    if problem is not None:
        raise OutputError(f"{out} was not written by the lab ({problem}), so --force does not "
                          f"replace it; move it away or choose another {flag}")
    check_same_command(out, read_marker(out), command, flag)
    foreign = foreign_files(out, read_marker(out))
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise OutputError(f"{out} holds files the lab did not write or that changed since ({shown}), so "
                          f"--force does not replace it; move them away or choose another {flag}")
    missing = missing_files(out, read_marker(out))
    if missing:
        raise OutputError(f"{out} lacks {', '.join(missing[:3])}, which its {MARKER} lists: a damaged folder, so "
                          f"--force does not replace it; move it away or choose another {flag}")


def make_temp_folder(parent: Path, name: str, command: str = "run") -> Path:
    """This process's own folder `.NAME.<pid>.XXXXXXXX.partial` in `parent`, marked with its pid (`make_folder`)."""
    return make_folder(parent, name, lambda tmp: write_marker(tmp, command, pid=os.getpid()))


class RunFolder:
    """Build a result folder under a temporary name; it appears under its real name only when complete.

        with RunFolder(out, force, command="run") as tmp:
            (tmp / "metrics.csv").write_text(...)
    On an exception (or Ctrl-C) the temporary folder is removed and `out` is untouched. `--force`
    replaces only a folder the lab wrote (`check_replaceable`), by `swap_into_place`.
    """

    def __init__(self, out: Path, force: bool = False, command: str = "run") -> None:
        self.out, self.force, self.command = Path(out), force, command
        self.tmp: Path | None = None

    def check(self) -> None:
        check_replaceable(self.out, self.force, command=self.command)

    def __enter__(self) -> Path:
        self.check()
        self.out.parent.mkdir(parents=True, exist_ok=True)
        warn_stale(self.out.parent, self.out.name)
        self.tmp = make_temp_folder(self.out.parent, self.out.name, self.command)
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            remove_own(self.tmp)
            return
        try:
            write_marker(self.tmp, self.command, [p.name for p in self.tmp.iterdir() if p.name != MARKER])
            self.check()  # nothing changed hands while we trained
            swap_into_place(self.tmp, self.out)
        except BaseException:
            remove_own(self.tmp)
            raise


class OutputFiles:
    """Write named files into an existing folder (such as `figures/`), replacing only the lab's own.

        files = OutputFiles(out, "reproduce"); files.check(names)
        with files.staging() as tmp: ...write names into tmp...
    The set is replaced as a whole (`replace_set`): the files being replaced, and those the previous
    run listed and this one no longer writes, move into a backup folder of this process, the new
    ones move in, the marker is rewritten, and only then is the backup deleted; on any failure or
    interrupt every file goes back. Anything else in the folder is left alone.
    """

    def __init__(self, out: Path, command: str) -> None:
        self.out, self.command = Path(out), command

    def check(self, names: list[str]) -> None:
        out = self.out
        if out.is_symlink() or (out.exists() and not out.is_dir()):
            raise OutputError(f"--out {out} must be a folder (not a file or a link)")
        check_not_inside(out)
        if not out.exists():
            return
        check_not_working_folder(out)
        marker = read_marker(out)
        check_same_command(out, marker, self.command)
        foreign = set(foreign_files(out, marker))
        clash = sorted(set(names) & foreign)
        if clash:
            problem = marker_problem(out) if (out / MARKER).exists() else None
            why = f" ({problem})" if problem else ""
            raise OutputError(f"{out} already holds {', '.join(clash)}, which the lab did not write (or which "
                              f"changed since it did){why}; move them away or choose another --out")

    @contextmanager
    def staging(self):
        """A temporary folder inside `out` to write the files into; moved in when the block succeeds."""
        self.out.mkdir(parents=True, exist_ok=True)
        warn_stale(self.out, self.command)
        tmp = make_temp_folder(self.out, self.command, self.command)
        try:
            yield tmp
            names = sorted(p.name for p in tmp.iterdir() if p.name != MARKER)
            self.check(names)
            self.replace_set(tmp, names)
        finally:
            remove_own(tmp)

    def replace_set(self, staged: Path, names: list[str]) -> None:
        """Move `names` from `staged` into `out` all together, or not at all (see the class docstring)."""
        out, previous = self.out, read_marker(self.out)
        changed = set(foreign_files(out, previous))
        retired = [n for n in (previous or {}).get("files", {}) if n not in names and n not in changed
                   and (out / n).is_file()]  # the lab's own files from an earlier run
        aside = [n for n in names if os.path.lexists(out / n)] + retired
        backup, moved_out, moved_in = unused_name(out, self.command, ".old"), [], []
        with signals_held():
            os.mkdir(backup)
            try:
                for name in aside:
                    os.replace(out / name, backup / name)
                    moved_out.append(name)
                for name in names:
                    os.replace(staged / name, out / name)
                    moved_in.append(name)
                write_marker(out, self.command, names)
            except BaseException:
                for name in moved_in:  # ours: back into the staging folder, removed with it
                    os.replace(out / name, staged / name)
                for name in moved_out:
                    os.replace(backup / name, out / name)
                remove_own(backup)
                raise
            remove_own(backup)
