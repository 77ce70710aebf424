"""The tracked tree holds the lab, not its environment: no symlink out of the repository, no log file."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tracked() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed.decode().split("\0") if name]


def test_no_tracked_symlink_leaves_the_repository():
    """A link such as `.venv-28 -> /work/wt/issue-28/.venv` points at one machine's folder: nobody else has it."""
    leaving = [p.relative_to(ROOT).as_posix() for p in tracked()
               if p.is_symlink() and not p.resolve().is_relative_to(ROOT.resolve())]
    assert not leaving, f"tracked symlinks out of the repository: {leaving}"


def test_no_log_file_is_tracked():
    logs = [p.relative_to(ROOT).as_posix() for p in tracked() if p.suffix == ".log" or p.name.endswith(".log.txt")]
    assert not logs, f"tracked log files: {logs}"


TOP_LEVEL = {"README.md", "pyproject.toml", "requirements.txt", "mkdocs.yml", ".gitignore", ".ci", "lab", "tasks",
             "notebooks", "tests", "figures", "docs"}
"""What the repository's top level holds: the project's files and folders (docs/architecture.md), nothing else."""


def test_the_top_level_holds_only_the_projects_own_files():
    """A wheel of a linter (pyflakes-4.1.0-py2.py3-none-any.whl) sat tracked at the top level for a while."""
    stray = sorted({p.relative_to(ROOT).parts[0] for p in tracked()} - TOP_LEVEL)
    assert not stray, f"tracked at the top level, outside the project's layout: {stray}"
