"""Single figure files (`lab diagnose --out`): the format follows the suffix, and the lab signs its files.

    suffix  .png | .pdf | .svg         -> that format (anything else is refused, listing these)
    mark    .NAME.lab-output beside NAME = {"written_by": "grpo-sorting-lab", "command": "diagnose",
            "files": {NAME: sha256}}; "grpo-sorting-lab diagnose" in the metadata too (PNG Software, ...)
    replace an existing file  <=>  its mark names the lab and diagnose, and the file still has the sha256 the
                                  mark lists; a user's file, or a lab figure edited since, is never replaced
    write the mark            <=>  no file by its name, or one the lab could have written for this figure (a user's
                                  file or a link named `.NAME.lab-output` is never replaced, nor NAME beside it)

The metadata says who made a figure wherever it travels; only the mark beside it, a hash the lab can check,
lets the lab replace it (text in a file can be copied into any file: a user's SVG may mention the lab).
"""

from __future__ import annotations

from pathlib import Path

import json
import os

from lab.files.output_folders import MARKER, WRITER, OutputError, check_not_inside, sha256, write_json_atomic

FIGURE_FORMATS = ("png", "pdf", "svg")
MARK = f"{WRITER} diagnose"
"""The text the lab writes into its figures' metadata (and looks for before replacing one)."""
METADATA_KEY = {"png": "Software", "pdf": "Creator", "svg": "Creator"}


def figure_format(path: Path, flag: str = "--out") -> str:
    """The format `path`'s suffix names; a `ValueError` (one line, the allowed suffixes) otherwise."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FIGURE_FORMATS:
        allowed = ", ".join(f".{f}" for f in FIGURE_FORMATS)
        raise ValueError(f"{flag} {path}: the suffix {Path(path).suffix or '(none)'} names no figure format "
                         f"the lab writes; use one of {allowed}")
    return suffix


def figure_metadata(fmt: str) -> dict:
    """Metadata for `Figure.savefig(..., metadata=...)` that marks the file as the lab's."""
    return {METADATA_KEY[fmt]: MARK}


COMMAND = "diagnose"
NAME_MAX = 255
"""The longest file name the lab writes; a figure's mark `.NAME.lab-output` must fit it too."""


def mark_path(path: Path) -> Path:
    """The mark beside a figure: `.NAME.lab-output`."""
    path = Path(path)
    return path.parent / f".{path.name}{MARKER}"


def sign(path: Path) -> None:
    """Write the mark beside the figure just written: the lab's name, the command and the figure's sha256."""
    write_json_atomic(mark_path(path), {"written_by": WRITER, "command": COMMAND,
                                        "files": {Path(path).name: sha256(path)}})


def own_mark(path: Path) -> dict | None:
    """The mark beside `path` where it is a file (no link) the lab could have written for it: the lab's name,
    diagnose, and a "files" list naming this figure alone; None otherwise (missing, a user's file, a link)."""
    mark = mark_path(path)
    try:
        if mark.is_symlink() or not mark.is_file():
            return None
        data = json.loads(mark.read_bytes()[:4096])
    except (OSError, ValueError, RecursionError):
        return None
    if (isinstance(data, dict) and data.get("written_by") == WRITER and data.get("command") == COMMAND
            and isinstance(data.get("files"), dict) and list(data["files"]) == [Path(path).name]):
        return data
    return None


def written_by_lab(path: Path) -> bool:
    """Whether the mark beside the file names the lab and diagnose and lists the file's current sha256."""
    mark = own_mark(path)
    try:
        return mark is not None and mark["files"][Path(path).name] == sha256(path)
    except OSError:
        return False


def check_figure_path(path: Path, flag: str = "--out") -> str:
    """The figure's format; raise unless `path` is free or a figure the lab wrote (`OutputError`)."""
    fmt = figure_format(path, flag)
    path = Path(path)
    size = len(os.fsencode(mark_path(path).name))
    if size > NAME_MAX:
        raise OutputError(f"{flag} {path}: the name is {size - len(MARKER) - 1} bytes long; a figure's name may have "
                          f"at most {NAME_MAX - len(MARKER) - 1} (its mark .NAME{MARKER} goes beside it): "
                          "choose a shorter name")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise OutputError(f"{flag} {path} is a folder or a link; name a figure file")
    check_not_inside(path, flag)
    if path.exists() and not written_by_lab(path):
        raise OutputError(f"{flag} {path} exists and is not a figure lab diagnose wrote unchanged (no mark "
                          f"{mark_path(path).name} beside it with its sha256), so it is not replaced; "
                          f"move it away or choose another {flag}")
    if os.path.lexists(mark_path(path)) and own_mark(path) is None:  # the mark's name is a name diagnose writes
        raise OutputError(f"{flag} {path}: {mark_path(path).name} beside it is not a mark lab diagnose wrote for this "
                          f"figure (a file of yours, or a link), so the lab writes neither; move it away or choose "
                          f"another {flag}")
    return fmt
