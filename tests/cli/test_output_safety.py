"""The lab deletes only what its own process created, and a failed or interrupted replace keeps the old output.

Full disks and Ctrl-C at a chosen moment are simulated through the lab's own seams: `os.replace`
inside `lab.files.temporaries` / `lab.files.output_folders` made to fail (ENOSPC) or raise KeyboardInterrupt.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import time

import pytest
from typer.testing import CliRunner

import lab.files.output_folders
import lab.files.temporaries
from lab.cli.commands import app
from lab.files.output_folders import MARKER, OutputFiles, RunFolder, read_marker

SHORT = ["run", "--epochs", "1", "--steps", "1", "--quiet"]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def failing_replace(monkeypatch, module, when, error):
    """Make `module.os.replace` raise `error` on the call for which `when(src, dst)` is true (once)."""
    real = os.replace
    state = {"raised": False}

    def replace(src, dst, *args, **kwargs):
        if not state["raised"] and when(str(src), str(dst)):
            state["raised"] = True
            raise error
        return real(src, dst, *args, **kwargs)
    monkeypatch.setattr(module.os, "replace", replace)
    return state


def test_a_plain_run_keeps_hidden_old_and_partial_folders_beside_it(tmp_path):
    """A copy of a finished run as `runs/.baseline.old` with the user's notes, a sweep copy as
    `.sweep-backup.partial`: a later run into runs/ leaves both, notes and all."""
    assert cli(*SHORT, "--out", "runs/first").exit_code == 0
    shutil.copytree(tmp_path / "runs" / "first", tmp_path / "runs" / ".baseline.old")
    (tmp_path / "runs" / ".baseline.old" / "notes.txt").write_text("mine")
    assert cli("sweep", "--epochs", "1", "--steps", "1", "--seeds", "1", "--quiet", "--out", "runs/sw").exit_code == 0
    shutil.copytree(tmp_path / "runs" / "sw", tmp_path / "runs" / ".sweep-backup.partial")
    (tmp_path / "runs" / ".sweep-backup.partial" / "analysis.txt").write_text("mine")
    result = cli(*SHORT)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / ".baseline.old" / "notes.txt").read_text() == "mine"
    assert (tmp_path / "runs" / ".sweep-backup.partial" / "analysis.txt").read_text() == "mine"


@pytest.mark.parametrize("command", [SHORT, ["sweep", "--epochs", "1", "--steps", "1", "--seeds", "1", "--quiet"]])
@pytest.mark.parametrize("error, code", [(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), 1),
                                         (KeyboardInterrupt(), 130)], ids=["full-disk", "ctrl-c"])
def test_a_failed_force_replace_puts_the_previous_output_back(tmp_path, monkeypatch, command, error, code):
    """The new folder fails to move into place after the old one was moved aside: the old one is renamed back,
    byte for byte, and no temporary folder is left."""
    assert cli(*command, "--out", "prev", "--seed" if command is SHORT else "--delta", "1" if command is SHORT
               else "centered").exit_code == 0
    before = {p: (tmp_path / "prev" / p).read_bytes() for p in os.listdir(tmp_path / "prev")}
    state = failing_replace(monkeypatch, lab.files.temporaries, lambda src, dst: src.endswith(".partial"), error)
    result = cli(*command, "--out", "prev", "--force")
    assert state["raised"] and result.exit_code == code, result.output
    assert os.listdir(tmp_path) == ["prev"]
    assert {p: (tmp_path / "prev" / p).read_bytes() for p in os.listdir(tmp_path / "prev")} == before


def test_a_run_folder_interrupted_while_moving_aside_is_untouched(tmp_path, monkeypatch):
    """Ctrl-C on the first rename (the old folder to its backup name): nothing moved, nothing left."""
    with RunFolder(tmp_path / "prev") as tmp:
        (tmp / "a.txt").write_text("old")
    failing_replace(monkeypatch, lab.files.temporaries, lambda src, dst: dst.endswith(".old"), KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        with RunFolder(tmp_path / "prev", force=True) as tmp:
            (tmp / "a.txt").write_text("new")
    assert os.listdir(tmp_path) == ["prev"] and (tmp_path / "prev" / "a.txt").read_text() == "old"


@pytest.mark.parametrize("stage", ["chmod", "marker"])
def test_an_interrupt_while_the_temporary_folder_is_made_leaves_nothing(tmp_path, monkeypatch, stage):
    """Ctrl-C right after mkdtemp returned, before the folder is marked: no empty `.partial` stays."""
    target, name = (lab.files.output_folders, "write_marker") if stage == "marker" else (lab.files.output_folders.Path, "chmod")
    real = getattr(target, name)

    def then_interrupted(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt
    monkeypatch.setattr(target, name, then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        with RunFolder(tmp_path / "new"):
            pass
    assert os.listdir(tmp_path) == []


def test_signals_are_held_while_temporaries_are_made_and_delivered_after():
    """SIGINT sent inside `signals_held` (as between mkdtemp and its marker) arrives only once the block is done."""
    reached = []
    # Python raises KeyboardInterrupt only where SIGINT has its handler: a suite started in the background by a
    # shell without job control (`nohup pytest &`) inherits SIGINT ignored, and a Ctrl-C could not reach it anyway
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with lab.files.temporaries.signals_held():
                signal.raise_signal(signal.SIGINT)  # to this thread: delivered before the next line, not whenever
                time.sleep(0.05)
                reached.append("end of block")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert reached == ["end of block"]


@pytest.mark.parametrize("nth", [1, 2, 3])
def test_reproduce_files_interrupted_while_moving_in_are_all_restored(tmp_path, monkeypatch, nth):
    """Ctrl-C while the new figures move in: every old figure is back under the old marker, so the next
    `lab reproduce` into the folder is not refused as holding files the lab did not write."""
    out = tmp_path / "rp"
    files = OutputFiles(out, "reproduce")
    with files.staging() as tmp:
        for name in ("a.png", "b.png", "RESULTS.md"):
            (tmp / name).write_text("old " + name)
    old_marker = (out / MARKER).read_text()
    calls = {"n": 0}

    def nth_move_in(src, dst):
        calls["n"] += 1 if ".partial" in src else 0
        return ".partial" in src and calls["n"] == nth
    failing_replace(monkeypatch, lab.files.output_folders, nth_move_in, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        with files.staging() as tmp:
            for name in ("a.png", "b.png", "RESULTS.md"):
                (tmp / name).write_text("new " + name)
    assert sorted(os.listdir(out)) == [MARKER, "RESULTS.md", "a.png", "b.png"]
    assert all((out / n).read_text() == "old " + n for n in ("a.png", "b.png", "RESULTS.md"))
    assert (out / MARKER).read_text() == old_marker
    files.check(["a.png", "b.png", "RESULTS.md"])  # the next reproduce is allowed in
    with files.staging() as tmp:
        (tmp / "a.png").write_text("new")
    assert sorted(os.listdir(out)) == [MARKER, "a.png"] and set(read_marker(out)["files"]) == {"a.png"}


def test_a_marker_that_is_not_json_is_reported_as_such(tmp_path):
    assert cli(*SHORT, "--out", "run").exit_code == 0
    (tmp_path / "run" / MARKER).write_text("{not json")
    result = cli(*SHORT, "--out", "run", "--force")
    assert result.exit_code == 2 and "not valid JSON" in result.output and "no .lab-output" not in result.output
    assert json.loads((tmp_path / "run" / "config.json").read_text())["command"] == "run"
