"""`lab diagnose` never answers a question it was not asked (issue 11 point 5) and never replaces a user's file.

A damaged or incomplete `--from-run` folder is an error naming the file and the problem (exit 2,
one line); it never falls back to the lecture's prompts. `--out` picks the format from its suffix
and replaces only a figure the lab signed.
"""

import json
import os

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.figures.figure_files import MARK, written_by_lab

FAST = ["--delta", "raw", "--group-size", "2"]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A real `lab run` folder on two custom prompts (so a fallback to the lecture's three would show)."""
    folder = tmp_path_factory.mktemp("runs") / "custom"
    result = CliRunner().invoke(app, ["run", "--prompts", "[[3,1,0,2],[2,2,0,1]]", "--vocab-size", "4",
                                      "--epochs", "1", "--steps", "1", "--out", str(folder), "--quiet"])
    assert result.exit_code == 0, result.output
    return folder


def diagnose(*args):
    return CliRunner().invoke(app, ["diagnose", *FAST, *args])


def one_line_error(result, *fragments):
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def damaged_copy(source, tmp_path, config) -> str:
    """A copy of the run folder whose config.json holds `config` (text as is, else JSON)."""
    folder = tmp_path / "damaged"
    folder.mkdir()
    for name in ("policy.pt", "summary.json"):
        (folder / name).write_bytes((source / name).read_bytes())
    (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return str(folder)


GOOD_TASK = {"name": "sorting", "prompts": [[3, 1, 0, 2], [2, 2, 0, 1]], "vocab_size": 4}


@pytest.mark.parametrize("config, fragments", [
    ('{"task": {"name": "sorting", ', ("config.json", "not valid JSON")),
    ({"command": "run"}, ("config.json", 'no "task"')),
    ({"task": {k: v for k, v in GOOD_TASK.items() if k != "prompts"}}, ("config.json", 'no "prompts"')),
    ({"task": {**GOOD_TASK, "vocab_size": "4"}}, ("config.json", '"vocab_size" must be an integer')),
    ({"task": {**GOOD_TASK, "prompts": [[3, 1, 0, "2"]]}}, ("config.json", "integer lists")),
    ({"task": {**GOOD_TASK, "prompts": [[3, 1, 0, 9]]}}, ("config.json", "must lie in 0..3")),
    ({"task": {**GOOD_TASK, "prompts": [[3, 1, 0]]}}, ("policy.pt", "(4, 4, 4)", "(4, 3, 3)")),
], ids=["bad-json", "no-task", "missing-key", "wrong-type", "bad-token-type", "token-outside-vocab",
        "shape-mismatch"])
def test_a_damaged_run_folder_is_an_error_naming_the_file_never_the_lectures_prompts(
        run_folder, tmp_path, config, fragments):
    """Issue 11 point 5: a damaged config.json used to make diagnose silently use the lecture's prompts."""
    one_line_error(diagnose("--from-run", damaged_copy(run_folder, tmp_path, config)), *fragments)
    assert not os.path.exists("runs")  # nothing written


def test_a_run_folder_without_config_needs_prompts_named(run_folder, tmp_path):
    folder = tmp_path / "bare"
    folder.mkdir()
    (folder / "policy.pt").write_bytes((run_folder / "policy.pt").read_bytes())
    one_line_error(diagnose("--from-run", str(folder)), "config.json", "--prompts")
    given = diagnose("--from-run", str(folder), "--prompts", "[[3,1,0,2]]", "--vocab-size", "4")
    assert given.exit_code == 0, given.output  # the user said which prompts: no guess involved


def test_a_diverged_run_has_no_policy_to_diagnose(tmp_path):
    folder = tmp_path / "diverged"
    result = CliRunner().invoke(app, ["run", "--lr", "10", "--steps", "50", "--kl", "0.05", "--epochs", "2",
                                      "--out", str(folder), "--quiet"])
    assert result.exit_code == 3, result.output
    one_line_error(diagnose("--from-run", str(folder)), "summary.json", "diverged")


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".pdf", b"%PDF"), (".svg", b"<?xml")])
def test_the_figure_format_follows_the_suffix_and_carries_the_labs_mark(tmp_path, suffix, magic):
    """`diagnose --out x.pdf` used to write PNG bytes."""
    out = tmp_path / f"variance{suffix}"
    result = diagnose("--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(magic) and written_by_lab(out)
    assert diagnose("--out", str(out)).exit_code == 0  # the lab's own figure is replaced
    assert os.listdir(tmp_path) == [out.name]


def test_an_unknown_suffix_is_refused_listing_the_allowed_ones(tmp_path):
    one_line_error(diagnose("--out", str(tmp_path / "v.jpg")), ".png, .pdf, .svg")
    assert os.listdir(tmp_path) == []


def test_a_users_file_is_never_replaced(tmp_path):
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"\x89PNG my own figure")
    one_line_error(diagnose("--out", str(mine)), "not written by the lab")
    assert mine.read_bytes() == b"\x89PNG my own figure"
    (tmp_path / "folder.png").mkdir()
    one_line_error(diagnose("--out", str(tmp_path / "folder.png")), "folder")
    assert MARK not in mine.read_text(errors="replace")


@pytest.mark.parametrize("args, fragment", [
    (["--dim", "0"], "--dim must be a positive integer"),
    (["--seed", str(10**23)], "--seed must be an integer"),
    (["--dim", "100000"], "needs about"),
    (["--group-size", "100000000"], "needs about"),
])
def test_bad_sizes_are_one_line_errors_not_crashes(args, fragment):
    """`diagnose --dim 0` used to raise ZeroDivisionError; a huge --dim or G an allocation traceback or a hang."""
    one_line_error(CliRunner().invoke(app, ["diagnose", *args]), fragment)
    assert not os.path.exists("runs")


def test_from_run_diagnoses_under_the_runs_own_reward(tmp_path):
    """A `--reward distance` run used to be diagnosed under inclusion-ordering without a word."""
    folder = tmp_path / "distance"
    assert CliRunner().invoke(app, ["run", "--reward", "distance", "--epochs", "1", "--steps", "1",
                                    "--out", str(folder), "--quiet"]).exit_code == 0
    result = diagnose("--from-run", str(folder), "--out", str(tmp_path / "d.png"))
    assert result.exit_code == 0, result.output
    assert "; distance reward;" in result.output
    asked = diagnose("--from-run", str(folder), "--reward", "inclusion-ordering", "--out", str(tmp_path / "i.png"))
    assert "; inclusion-ordering reward;" in asked.output  # what the user names explicitly still wins


def test_a_policy_from_another_run_dropped_into_a_run_folder_is_refused(tmp_path):
    """policy.pt of a --dim 4 run copied into a dim-10 run's folder: the folder's .lab-output no longer vouches
    for it, so diagnose names the file instead of diagnosing a policy the folder does not describe."""
    for name, dim in (("small", "4"), ("big", "10")):
        assert CliRunner().invoke(app, ["run", "--dim", dim, "--epochs", "1", "--steps", "1",
                                        "--out", str(tmp_path / name), "--quiet"]).exit_code == 0
    assert diagnose("--from-run", str(tmp_path / "big"), "--out", str(tmp_path / "ok.png")).exit_code == 0
    (tmp_path / "big" / "policy.pt").write_bytes((tmp_path / "small" / "policy.pt").read_bytes())
    one_line_error(diagnose("--from-run", str(tmp_path / "big")), "policy.pt", "sha256")
    assert not os.path.exists("runs")
