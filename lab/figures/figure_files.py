"""Single figure files (`lab diagnose --out`): the format follows the suffix, and the lab signs its files.

    suffix  .png | .pdf | .svg         -> that format (anything else is refused, listing these)
    mark    "grpo-sorting-lab" in the file's metadata (PNG Software, PDF Creator, SVG Creator)
    replace an existing file  <=>  it carries the mark (the lab wrote it); a user's file is never replaced

A folder has `lab.files.output_folders`' marker file; a single file carries its mark inside, so it travels with it.
"""

from __future__ import annotations

from pathlib import Path

from lab.files.output_folders import WRITER, OutputError

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


def written_by_lab(path: Path) -> bool:
    """Whether the file carries the lab's mark (searched in its bytes: the metadata is stored as text)."""
    try:
        return MARK.encode() in Path(path).read_bytes()
    except OSError:
        return False


def check_figure_path(path: Path, flag: str = "--out") -> str:
    """The figure's format; raise unless `path` is free or a figure the lab wrote (`OutputError`)."""
    fmt = figure_format(path, flag)
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise OutputError(f"{flag} {path} is a folder or a link; name a figure file")
    if path.exists() and not written_by_lab(path):
        raise OutputError(f"{flag} {path} exists and was not written by the lab, so it is not replaced; "
                          f"move it away or choose another {flag}")
    return fmt
