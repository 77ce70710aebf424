"""Output problems surface before training, and a failure while writing leaves nothing (issue 11 point 3).

`--out` under a file, a read-only parent, a name too long used to fail after training, as a
traceback, losing the run. Conditions a test cannot create for real (a read-only file system, a
full disk) are simulated by making the system call fail the way the kernel would.
"""

import errno
import os

import pytest
from typer.testing import CliRunner

import lab.cli.run_command
import lab.figures.plots
import lab.files.writable
from lab.cli.commands import app
from lab.files.writable import TEMP_NAME_EXTRA, check_writable, name_max

SHORT = ["--epochs", "1", "--steps", "1", "--quiet"]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if training starts: every check here must come before it."""
    def refuse(*args, **kwargs):
        raise AssertionError("training started before the output was checked")
    monkeypatch.setattr(lab.cli.run_command, "train", refuse)


def one_line(result, code: int, *fragments) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == code and len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def everything(folder) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, ds, fs in os.walk(folder) for n in ds + fs)


@pytest.mark.parametrize("command", [["run"], ["sweep", "--seeds", "1"]])
def test_out_under_a_file_fails_before_training(tmp_path, no_training, command):
    (tmp_path / "notes.txt").write_text("x")
    one_line(CliRunner().invoke(app, [*command, *SHORT, "--out", "notes.txt/run"]), 2, "is a file, not a folder")
    one_line(CliRunner().invoke(app, [*command, *SHORT, "--out", "notes.txt/a/b"]), 2, "is a file")
    assert everything(tmp_path) == ["notes.txt"]


def test_a_name_too_long_fails_before_training(tmp_path, no_training):
    room = name_max(tmp_path)  # the temporary folder keeps only part of the name, so the whole NAME_MAX is usable
    message = one_line(CliRunner().invoke(app, ["run", *SHORT, "--out", "r" * (room + 1)]), 2, "shorter name")
    assert f"more than the {room} this file system allows" in message
    one_line(CliRunner().invoke(app, ["run", *SHORT, "--out", "x" * 300 + "/run"]), 2, "shorter name")
    assert everything(tmp_path) == []
    check_writable(tmp_path / ("r" * room))  # the longest name that fits is accepted
    assert TEMP_NAME_EXTRA + 200 <= room


def test_a_name_of_254_bytes_is_written(tmp_path):
    """The file system allows 255 bytes; a folder named with 254 is built, renamed and replaced like any other."""
    name = "r" * 254
    assert CliRunner().invoke(app, ["run", *SHORT, "--out", name]).exit_code == 0
    assert CliRunner().invoke(app, ["run", *SHORT, "--out", name, "--force"]).exit_code == 0
    assert os.listdir(tmp_path) == [name] and "metrics.csv" in os.listdir(tmp_path / name)


def test_an_unwritable_parent_fails_before_training(tmp_path, no_training, monkeypatch):
    """A read-only folder (as a user without rights, or a read-only mount, which even root cannot write)."""
    (tmp_path / "locked").mkdir()
    real_access = os.access
    monkeypatch.setattr(lab.files.writable.os, "access", lambda path, mode: False if str(path).endswith("locked")
                        else real_access(path, mode))
    one_line(CliRunner().invoke(app, ["run", *SHORT, "--out", "locked/run"]), 2, "cannot write into", "locked")

    def read_only_fs(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))
    monkeypatch.setattr(lab.files.writable.tempfile, "mkdtemp", read_only_fs)
    one_line(CliRunner().invoke(app, ["run", *SHORT, "--out", "elsewhere/run"]), 2, "Read-only file system")
    assert everything(tmp_path) == ["locked"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_for_real(tmp_path, no_training):
    (tmp_path / "ro").mkdir(mode=0o555)
    one_line(CliRunner().invoke(app, ["run", *SHORT, "--out", "ro/run"]), 2, "cannot write into")


@pytest.mark.parametrize("failing", ["write_text_atomic", "plot_run"])
def test_a_full_disk_while_writing_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, failing):
    """ENOSPC at the first file or at the last: exit 1, one line, no run folder, no hidden partial folder."""
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(lab.figures.plots if failing == "plot_run" else lab.cli.run_command, failing, full)
    one_line(CliRunner().invoke(app, ["run", *SHORT, "--out", "run"]), 1, "No space left on device",
             "nothing was written")
    assert everything(tmp_path) == []
