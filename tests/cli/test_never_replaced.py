"""Nothing the lab did not write changes (issue 34): `--force` trusts only a sound mark, and `lab diagnose` replaces no
file of the user's at any name it writes, its mark's name included.

    --force OUT replaces OUT  =>  OUT's mark is a file (no link), lists only names inside OUT, every one of them there
                                  and a file (no link), unchanged since
    diagnose --out F          =>  F and .F.lab-output are each missing or the lab's own

Mutants tried: `marker_problem` without the link check (the mark linked elsewhere was trusted and OUT replaced),
without `plain_name` (a mark naming ../victim.txt was trusted), `check_replaceable` without `missing_files`,
`foreign_files` without its `is_symlink` (a listed link was deleted), `check_figure_path` without the mark-name
check (the user's `.ghost.svg.lab-output` was replaced by the lab's mark, exit 0): each fails a case here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.files.output_folders import MARKER, sha256
from tests.cli.cli_tools import one_line

SHORT = ["--epochs", "1", "--steps", "1", "--quiet", "--device", "cpu"]
COMMANDS = {"run": ["run", *SHORT], "sweep": ["sweep", *SHORT, "--seeds", "1"],
            "reward-model": ["reward-model", "--size", "small", "--pairs-per-prompt", "2", "--steps", "2", "--quiet"]}


def lab(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A folder of each command that writes one."""
    folder = tmp_path_factory.mktemp("written")
    for command, args in COMMANDS.items():
        result = lab(*args, "--out", folder / command)
        assert result.exit_code == 0, result.output
    return folder


def snapshot(root: Path) -> dict:
    """Every entry under `root`: a link by its target, a file by its bytes (what must not change)."""
    entries = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        entries[key] = ("link", os.readlink(path)) if path.is_symlink() else \
            ("file", path.read_bytes()) if path.is_file() else ("folder",)
    return entries


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("damage", ["a listed file missing", "the mark names ../victim.txt",
                                    "the mark names an absolute path", "a listed file is a link",
                                    "the mark is a link"])
def test_force_replaces_no_folder_whose_mark_is_not_sound(command, damage, written, tmp_path, monkeypatch):
    """Five kinds of damage `--force` used to replace in silence (deleting the link placed inside): each refused
    with one line, the folder and the file outside it byte-identical."""
    out = tmp_path / "out"
    shutil.copytree(written / command, out)
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's")
    mark = json.loads((out / MARKER).read_text())
    listed = sorted(mark["files"])[0]
    if damage == "a listed file missing":
        (out / listed).unlink()
    elif damage.startswith("the mark names"):
        name = "../victim.txt" if "../" in damage else str(victim)
        (out / MARKER).write_text(json.dumps({**mark, "files": {**mark["files"], name: sha256(victim)}}))
    elif damage == "a listed file is a link":
        shutil.copy(out / listed, tmp_path / listed)
        (out / listed).unlink()
        (out / listed).symlink_to(tmp_path / listed)
    else:
        shutil.copy(out / MARKER, tmp_path / "mark-elsewhere")
        (out / MARKER).unlink()
        (out / MARKER).symlink_to(tmp_path / "mark-elsewhere")
    before = snapshot(tmp_path)
    monkeypatch.chdir(tmp_path)
    one_line(lab(*COMMANDS[command], "--out", out, "--force"), 2, str(out))
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("where", ["the figure", "the mark", "the mark, as a link"])
def test_diagnose_replaces_no_user_file_at_any_name_it_writes(where, tmp_path, monkeypatch):
    """`--out ghost.svg` with the user's file at ghost.svg, at its mark's name .ghost.svg.lab-output (used to be
    replaced by the lab's mark, exit 0), or a link there to a file elsewhere: refused, every file as it was."""
    monkeypatch.chdir(tmp_path)
    names = {"the figure": "ghost.svg", "the mark": ".ghost.svg.lab-output", "the mark, as a link": ".ghost.svg.lab-output"}
    (tmp_path / "elsewhere.txt").write_text("the user's")
    if where.endswith("link"):
        (tmp_path / names[where]).symlink_to(tmp_path / "elsewhere.txt")
    else:
        (tmp_path / names[where]).write_text("the user's")
    before = snapshot(tmp_path)
    one_line(lab("diagnose", "--delta", "raw", "--group-size", "2", "--out", "ghost.svg"), 2, "ghost.svg")
    assert snapshot(tmp_path) == before


def test_diagnose_replaces_its_own_figure_and_mark(tmp_path, monkeypatch):
    """The other side of the promise: a figure the lab wrote, with its mark, is replaced (twice, same name)."""
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        result = lab("diagnose", "--delta", "raw", "--group-size", "2", "--out", "ghost.svg")
        assert result.exit_code == 0, result.output
    assert sorted(os.listdir(tmp_path)) == [".ghost.svg.lab-output", "ghost.svg"]


def test_diagnose_default_name_keeps_a_user_file_at_its_marks_name(tmp_path, monkeypatch):
    """Without --out: the user's file at the default figure's mark name is not replaced either."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    mark = tmp_path / "runs" / ".diagnose-inclusion-ordering-lecture-init-seed5-dim10.png.lab-output"
    mark.write_text("the user's")
    one_line(lab("diagnose", "--delta", "raw", "--group-size", "2"), 2, mark.name)
    assert os.listdir(tmp_path / "runs") == [mark.name] and mark.read_text() == "the user's"
