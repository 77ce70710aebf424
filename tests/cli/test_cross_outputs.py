"""No command writes into, or replaces, a folder or file that the same command did not write unchanged.

Every writing command (run, sweep, reproduce, diagnose, reward-model) is pointed at what each other command wrote, and at
lab outputs edited afterwards: each is refused before any work with one line and exit 2, and every byte stays.
`lab reproduce --out myrun` used to delete a run's config.json, metrics.csv, policy.pt, ...; `lab diagnose
--out mine.svg` replaced a user's SVG that mentioned the lab's name, and a lab figure annotated since.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.files.output_folders import OutputFiles
from tests.cli.cli_tools import one_line

QUICK = ["--epochs", "1", "--steps", "1", "--quiet"]
WRITERS = {
    "run": lambda out: ["run", *QUICK, "--out", out, "--force"],
    "sweep": lambda out: ["sweep", *QUICK, "--seeds", "1", "--out", out, "--force"],
    "reproduce": lambda out: ["reproduce", "--seeds", "6", "--quiet", "--out", out],
    "diagnose": lambda out: ["diagnose", "--group-size", "2", "--out", out],
    "reward-model": lambda out: ["reward-model", "--steps", "1", "--pairs-per-prompt", "1", "--quiet", "--out", out,
                                 "--force"],
}


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def lab(*args: str):
    return CliRunner().invoke(app, list(args))


def write_output(kind: str) -> Path:
    """A folder (or figure) the command `kind` wrote; reproduce's is made by its own writer, `OutputFiles`."""
    if kind == "reproduce":
        files = OutputFiles(Path("made"), "reproduce")
        with files.staging() as tmp:
            (tmp / "RESULTS.md").write_text("results\n")
        return Path("made")
    out = "made.png" if kind == "diagnose" else "made"
    assert lab(*WRITERS[kind](out)[:-1 if kind in ("run", "sweep", "reward-model") else None]).exit_code == 0
    return Path(out)


def snapshot(path: Path) -> dict:
    """Every file under `path` (and a figure's mark beside it) with its bytes."""
    paths = [path, path.parent / f".{path.name}.lab-output"] if path.is_file() else \
        [Path(root) / name for root, _, names in os.walk(path) for name in names]
    return {str(p): p.read_bytes() for p in paths if p.is_file()}


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("target", sorted(WRITERS))
def test_no_command_writes_over_another_commands_output(writer, target):
    """Each command against the output of each other command, and into it: refused, nothing changed."""
    if writer == target:
        return  # a command may replace its own output unchanged (tests/cli/test_output_safety.py)
    made = write_output(target)
    before, listing = snapshot(made), sorted(os.listdir("."))
    for out in (made, made / "inside.png" if made.is_dir() else None):
        if out is not None and not (writer != "diagnose" and out.suffix == ".png"):
            one_line(lab(*WRITERS[writer](str(out))), 2, str(out))
    if made.is_dir() and writer != "diagnose":
        one_line(lab(*WRITERS[writer](str(made / "inside"))), 2, "inside made/")
    assert snapshot(made) == before and sorted(os.listdir(".")) == listing


def test_reproduce_names_the_command_that_wrote_the_folder():
    made = write_output("run")
    one_line(lab(*WRITERS["reproduce"](str(made))), 2, "lab run wrote", "choose another --out")


def test_a_users_svg_that_names_the_lab_is_not_replaced():
    """The mark used to be the lab's name anywhere in the file's bytes."""
    mine = Path("mine.svg")
    mine.write_text('<?xml version="1.0"?><svg><!-- grpo-sorting-lab diagnose --></svg>')
    one_line(lab("diagnose", "--group-size", "2", "--out", str(mine)), 2, "not a figure lab diagnose wrote")
    assert mine.read_text().startswith("<?xml") and os.listdir(".") == ["mine.svg"]


@pytest.mark.parametrize("suffix", [".svg", ".png"])
def test_a_lab_figure_edited_since_is_not_replaced(suffix):
    """A lab figure annotated afterwards: the sha256 in its mark no longer matches, so it is the user's now."""
    out = Path(f"v{suffix}")
    assert lab("diagnose", "--group-size", "2", "--out", str(out)).exit_code == 0
    assert lab("diagnose", "--group-size", "2", "--out", str(out)).exit_code == 0  # unchanged: replaced
    out.write_bytes(out.read_bytes() + b"\n<!-- my note -->")
    edited = out.read_bytes()
    one_line(lab("diagnose", "--group-size", "2", "--out", str(out)), 2, "not a figure lab diagnose wrote")
    assert out.read_bytes() == edited
