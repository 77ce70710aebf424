"""The lab never deletes or overwrites what it did not write (`lab.files.output_folders`, issue 11)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.files.output_folders import MARKER, OutputError, OutputFiles, RunFolder, read_marker

SHORT = ["run", "--epochs", "1", "--steps", "1", "--quiet"]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def one_line_error(result, expected: str) -> None:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and expected in lines[0], lines[0]


def lab(*args: str):
    return CliRunner().invoke(app, list(args))


def test_force_refuses_a_users_folder_and_deletes_nothing(tmp_path):
    """`mkdir d; echo x > d/notes.txt; lab run --out d --force` used to delete notes.txt."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("x")
    for command in (SHORT, ["sweep", "--epochs", "1", "--steps", "1", "--seeds", "1", "--quiet"]):
        one_line_error(lab(*command, "--out", "d", "--force"), "not written by the lab")
        assert os.listdir(tmp_path) == ["d"] and os.listdir(tmp_path / "d") == ["notes.txt"]


@pytest.mark.parametrize("out", [".", "..", "sub/..", str(os.sep)])
def test_force_refuses_the_working_folder_and_its_ancestors(tmp_path, out):
    """`lab run --out . --force` used to empty the working folder; an ancestor would be worse."""
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "sub").mkdir()
    one_line_error(lab(*SHORT, "--out", out, "--force"), "working folder or one above it")
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "sub"]


def test_the_working_folder_is_refused_even_when_it_is_a_lab_folder(tmp_path):
    assert lab(*SHORT, "--out", "run").exit_code == 0
    os.chdir(tmp_path / "run")
    one_line_error(lab(*SHORT, "--out", ".", "--force"), "working folder")
    assert MARKER in os.listdir(".")


def test_force_refuses_a_lab_folder_whose_files_changed(tmp_path):
    assert lab(*SHORT, "--out", "run").exit_code == 0
    (tmp_path / "run" / "samples.txt").write_text("annotated by hand")
    one_line_error(lab(*SHORT, "--out", "run", "--force"), "samples.txt")
    assert (tmp_path / "run" / "samples.txt").read_text() == "annotated by hand"


def test_force_refuses_a_link(tmp_path):
    assert lab(*SHORT, "--out", "run").exit_code == 0
    (tmp_path / "link").symlink_to(tmp_path / "run")
    one_line_error(lab(*SHORT, "--out", "link", "--force"), "is a link")
    assert (tmp_path / "run" / "metrics.csv").exists()


def test_force_replaces_a_lab_folder_and_the_marker_vouches_for_every_file(tmp_path):
    assert lab(*SHORT, "--out", "run", "--seed", "1").exit_code == 0
    assert lab(*SHORT, "--out", "run", "--force").exit_code == 0
    marker = read_marker(tmp_path / "run")
    assert marker["command"] == "run"
    assert set(marker["files"]) == set(os.listdir(tmp_path / "run")) - {MARKER}
    assert json.loads((tmp_path / "run" / "config.json").read_text())["config"]["seed"] == 5
    assert sorted(os.listdir(tmp_path)) == ["run"]  # no temporary folder left beside it


def test_temporaries_of_other_processes_are_reported_and_never_deleted(tmp_path, capsys):
    """A writer killed mid-write (SIGKILL, power loss) leaves `.NAME.<pid>.XXXX.partial` or `.old`: the next
    write into that parent names it on stderr and deletes nothing, whatever marker or pid it carries."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    for name, pid in ((f".new.{dead_pid}.abcd1234.partial", dead_pid), (f".new.{dead_pid}.abcd9999.old", None),
                      (".old.1.partial", dead_pid), (f".new.{os.getpid() + 10**6}.x.partial", None)):
        (tmp_path / name).mkdir()
        (tmp_path / name / MARKER).write_text(json.dumps({"written_by": "grpo-sorting-lab", "pid": pid}))
        (tmp_path / name / "notes.txt").write_text("mine")
    before = sorted(os.listdir(tmp_path))
    with RunFolder(tmp_path / "new") as tmp:
        (tmp / "a.txt").write_text("a")
    assert sorted(os.listdir(tmp_path)) == sorted([*before, "new"])
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 3 and all("leaves it alone" in line for line in warnings)
    assert any(f".new.{dead_pid}.abcd9999.old" in line and "being replaced" in line for line in warnings)


def test_output_files_replace_only_the_labs_own_files(tmp_path):
    """What `lab reproduce` does in figures/: a user's file of another name stays; one of a clashing name is
    refused; a file the lab wrote earlier and no longer writes is removed."""
    out = tmp_path / "figures"
    out.mkdir()
    (out / "mine.txt").write_text("user")
    files = OutputFiles(out, "reproduce")
    with files.staging() as tmp:
        (tmp / "a.png").write_text("1")
        (tmp / "b.png").write_text("1")
    with files.staging() as tmp:
        (tmp / "a.png").write_text("2")
    assert sorted(os.listdir(out)) == [MARKER, "a.png", "mine.txt"] and (out / "a.png").read_text() == "2"

    (out / "a.png").write_text("edited by hand")
    with pytest.raises(OutputError, match="a.png"):
        files.check(["a.png"])
    with pytest.raises(OutputError, match="mine.txt"):
        files.check(["mine.txt"])
    assert (out / "a.png").read_text() == "edited by hand" and (out / "mine.txt").read_text() == "user"


def test_reproduce_refuses_to_overwrite_a_users_figure_before_training(tmp_path):
    (tmp_path / "figs").mkdir()
    (tmp_path / "figs" / "RESULTS.md").write_text("my own results")
    one_line_error(lab("reproduce", "--out", "figs", "--quiet"), "RESULTS.md")
    assert os.listdir(tmp_path / "figs") == ["RESULTS.md"]
    one_line_error(lab("reproduce", "--out", ".", "--quiet"), "working folder")
