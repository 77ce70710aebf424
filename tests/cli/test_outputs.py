"""Output folders: the lab never deletes or overwrites what it did not write, and problems surface before training.

The lab never deletes or overwrites what it did not write (`lab.files.output_folders`).

Output problems surface before training, and a failure while writing leaves nothing.

`--out` under a file, a read-only parent, a name too long used to fail after training, as a
traceback, losing the run. Conditions a test cannot create for real (a read-only file system, a
full disk) are simulated by making the system call fail the way the kernel would.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import lab.cli.run_command
import lab.training.train
import lab.figures.plots
import lab.files.writable
from lab.cli.commands import app
from lab.files.output_folders import MARKER, OutputError, OutputFiles, RunFolder, read_marker
from lab.files.writable import TEMP_NAME_EXTRA, check_writable, name_max
from tests.cli.cli_tools import one_line

SHORT = ["run", "--epochs", "1", "--steps", "1", "--quiet"]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def one_line_error(result, expected: str) -> None:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and expected in lines[0], lines[0]


def lab_command(*args: str):
    return CliRunner().invoke(app, list(args))


def test_force_refuses_a_users_folder_and_deletes_nothing(tmp_path):
    """`mkdir d; echo x > d/notes.txt; lab run --out d --force` used to delete notes.txt."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("x")
    for command in (SHORT, ["sweep", "--epochs", "1", "--steps", "1", "--seeds", "1", "--quiet"]):
        one_line_error(lab_command(*command, "--out", "d", "--force"), "not written by the lab")
        assert os.listdir(tmp_path) == ["d"] and os.listdir(tmp_path / "d") == ["notes.txt"]


@pytest.mark.parametrize("out", [".", "..", "sub/..", str(os.sep)])
def test_force_refuses_the_working_folder_and_its_ancestors(tmp_path, out):
    """`lab run --out . --force` used to empty the working folder; an ancestor would be worse."""
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "sub").mkdir()
    one_line_error(lab_command(*SHORT, "--out", out, "--force"), "working folder or one above it")
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "sub"]


def test_the_working_folder_is_refused_even_when_it_is_a_lab_folder(tmp_path):
    assert lab_command(*SHORT, "--out", "run").exit_code == 0
    os.chdir(tmp_path / "run")
    one_line_error(lab_command(*SHORT, "--out", ".", "--force"), "working folder")
    assert MARKER in os.listdir(".")


def test_force_refuses_a_lab_folder_whose_files_changed(tmp_path):
    assert lab_command(*SHORT, "--out", "run").exit_code == 0
    (tmp_path / "run" / "samples.txt").write_text("annotated by hand")
    one_line_error(lab_command(*SHORT, "--out", "run", "--force"), "samples.txt")
    assert (tmp_path / "run" / "samples.txt").read_text() == "annotated by hand"


def test_force_refuses_a_link(tmp_path):
    assert lab_command(*SHORT, "--out", "run").exit_code == 0
    (tmp_path / "link").symlink_to(tmp_path / "run")
    one_line_error(lab_command(*SHORT, "--out", "link", "--force"), "is a link")
    assert (tmp_path / "run" / "metrics.csv").exists()


def test_force_replaces_a_lab_folder_and_the_marker_vouches_for_every_file(tmp_path):
    assert lab_command(*SHORT, "--out", "run", "--seed", "1").exit_code == 0
    assert lab_command(*SHORT, "--out", "run", "--force").exit_code == 0
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
    one_line_error(lab_command("reproduce", "--out", "figs", "--quiet"), "RESULTS.md")
    assert os.listdir(tmp_path / "figs") == ["RESULTS.md"]
    one_line_error(lab_command("reproduce", "--out", ".", "--quiet"), "working folder")


SHORT_OPTIONS = ["--epochs", "1", "--steps", "1", "--quiet"]


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if training starts: every check here must come before it."""
    def refuse(*args, **kwargs):
        raise AssertionError("training started before the output was checked")
    monkeypatch.setattr(lab.training.train, "train", refuse)  # `lab run` imports it as it starts




def everything(folder) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, ds, fs in os.walk(folder) for n in ds + fs)


@pytest.mark.parametrize("command", [["run"], ["sweep", "--seeds", "1"]])
def test_out_under_a_file_fails_before_training(tmp_path, no_training, command):
    (tmp_path / "notes.txt").write_text("x")
    one_line(CliRunner().invoke(app, [*command, *SHORT_OPTIONS, "--out", "notes.txt/run"]), 2, "is a file, not a folder")
    one_line(CliRunner().invoke(app, [*command, *SHORT_OPTIONS, "--out", "notes.txt/a/b"]), 2, "is a file")
    assert everything(tmp_path) == ["notes.txt"]


def test_a_name_too_long_fails_before_training(tmp_path, no_training):
    room = name_max(tmp_path)  # the temporary folder keeps only part of the name, so the whole NAME_MAX is usable
    message = one_line(CliRunner().invoke(app, ["run", *SHORT_OPTIONS, "--out", "r" * (room + 1)]), 2, "shorter name")
    assert f"more than the {room} this file system allows" in message
    one_line(CliRunner().invoke(app, ["run", *SHORT_OPTIONS, "--out", "x" * 300 + "/run"]), 2, "shorter name")
    assert everything(tmp_path) == []
    check_writable(tmp_path / ("r" * room))  # the longest name that fits is accepted
    assert TEMP_NAME_EXTRA + 200 <= room


def test_a_name_of_254_bytes_is_written(tmp_path):
    """The file system allows 255 bytes; a folder named with 254 is built, renamed and replaced like any other."""
    name = "r" * 254
    assert CliRunner().invoke(app, ["run", *SHORT_OPTIONS, "--out", name]).exit_code == 0
    assert CliRunner().invoke(app, ["run", *SHORT_OPTIONS, "--out", name, "--force"]).exit_code == 0
    assert os.listdir(tmp_path) == [name] and "metrics.csv" in os.listdir(tmp_path / name)


def test_an_unwritable_parent_fails_before_training(tmp_path, no_training, monkeypatch):
    """A read-only folder (as a user without rights, or a read-only mount, which even root cannot write)."""
    (tmp_path / "locked").mkdir()
    real_access = os.access
    monkeypatch.setattr(lab.files.writable.os, "access", lambda path, mode: False if str(path).endswith("locked")
                        else real_access(path, mode))
    one_line(CliRunner().invoke(app, ["run", *SHORT_OPTIONS, "--out", "locked/run"]), 2, "cannot write into", "locked")

    def read_only_fs(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))
    monkeypatch.setattr(lab.files.writable.tempfile, "mkdtemp", read_only_fs)
    one_line(CliRunner().invoke(app, ["run", *SHORT_OPTIONS, "--out", "elsewhere/run"]), 2, "Read-only file system")
    assert everything(tmp_path) == ["locked"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_for_real(tmp_path, no_training):
    (tmp_path / "ro").mkdir(mode=0o555)
    one_line(CliRunner().invoke(app, ["run", *SHORT_OPTIONS, "--out", "ro/run"]), 2, "cannot write into")


@pytest.mark.parametrize("failing", ["write_text_atomic", "plot_run"])
def test_a_full_disk_while_writing_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, failing):
    """ENOSPC at the first file or at the last: exit 1, one line, no run folder, no hidden partial folder."""
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(lab.figures.plots if failing == "plot_run" else lab.cli.run_command, failing, full)
    one_line(CliRunner().invoke(app, ["run", *SHORT_OPTIONS, "--out", "run"]), 1, "No space left on device",
             "nothing was written")
    assert everything(tmp_path) == []
