"""Every folder the lab reads is checked like every folder it writes (issue 34): the path's length, the mark, then the
content, each problem one `Error:` line and exit code 2, before anything is written.

    readers:  --init-from, --demos-from (run, sweep), --pairs-from, --reward learned: (run, sweep),
              diagnose --from-run, reward-model --from-run
    path      a name over NAME_MAX or a path over PATH_MAX: refused (was `OSError: [Errno 36]` as a traceback)
    mark      a listed file missing, the mark a link, the mark naming a path outside the folder: not the lab's folder
    content   a mark rewritten to match damaged files (a script can do it) vouches for nothing: JSON nested 100,000
              deep, pairs.csv with a bad token, header, row or prompt index, a model.pt or policy.pt that holds NaN or
              is not the one config.json describes: each refused naming the file

Mutants tried: `check_path_fits` returning at once (Errno 36 tracebacks), `check_marked` without the missing-file
loop (a deleted config.json trained), `read_json` without the RecursionError branch, `read_pairs` without the
prompt-column check, `load_run_policy` without `policy_mismatch`: each fails a case here.
"""

from __future__ import annotations

import json
import math
import os
import shutil

import pytest
import torch
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.files.output_folders import MARKER, sha256
from lab.policies import make_policy
from lab.policies.factorized import save_policy
from tests.cli.cli_tools import one_line

SHORT = ["--epochs", "1", "--steps", "1", "--quiet", "--device", "cpu"]


def lab(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A finished run and a small reward model, to damage copies of."""
    folder = tmp_path_factory.mktemp("sources")
    assert lab("run", *SHORT, "--out", folder / "run").exit_code == 0
    result = lab("reward-model", "--size", "small", "--pairs-per-prompt", "4", "--steps", "5", "--quiet",
                 "--out", folder / "rm")
    assert result.exit_code == 0, result.output
    return folder


READERS = {
    "run --init-from": (["run", *SHORT, "--init-from"], "run"),
    "sweep --init-from": (["sweep", *SHORT, "--seeds", "1", "--init-from"], "run"),
    "run --demos-from": (["run", *SHORT, "--loss", "sft", "--demos", "policy", "--demos-from"], "run"),
    "sweep --demos-from": (["sweep", *SHORT, "--seeds", "1", "--loss", "sft", "--demos", "policy", "--demos-from"],
                           "run"),
    "diagnose --from-run": (["diagnose", "--delta", "raw", "--group-size", "2", "--from-run"], "run"),
    "reward-model --from-run": (["reward-model", "--steps", "1", "--quiet", "--from-run"], "run"),
    "run --pairs-from": (["run", *SHORT, "--loss", "dpo", "--kl", "0.1", "--pairs-from"], "rm"),
    "sweep --pairs-from": (["sweep", *SHORT, "--seeds", "1", "--loss", "dpo", "--kl", "0.1", "--pairs", "offline",
                            "--pairs-from"], "rm"),
    "run --reward learned:": (["run", *SHORT, "--reward"], "rm"),
    "sweep --reward learned:": (["sweep", *SHORT, "--seeds", "1", "--reward"], "rm"),
}


def read(reader: str, folder):
    """The command of `reader` on `folder`, from an empty working folder; the one line it ends with, exit 2."""
    args, _ = READERS[reader]
    value = f"learned:{folder}" if reader.endswith("learned:") else folder
    return lab(*args, value)


def copy_of(sources, kind: str, tmp_path):
    shutil.copytree(sources / kind, tmp_path / "copy")
    return tmp_path / "copy"


def rewrite_mark(folder):
    """What a script or a careless copy can do: the mark made to match the folder's files as they are now."""
    mark = json.loads((folder / MARKER).read_text())
    mark["files"] = {name: sha256(folder / name) for name in mark["files"] if (folder / name).is_file()}
    (folder / MARKER).write_text(json.dumps(mark))


@pytest.fixture
def empty_cwd(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("length", ["name", "path"])
def test_a_folder_argument_longer_than_the_file_system_allows_is_one_line(reader, length, tmp_path, empty_cwd):
    """A 300-byte name, or a 5,000-byte path, for every option that names a folder to read: one line naming the
    option and the limit (was `OSError: [Errno 36] File name too long`, a traceback, in 70 calls)."""
    folder = "x" * 300 if length == "name" else "/".join(["y" * 200] * 25)
    one_line(read(reader, folder), 2, "this file system allows")
    assert os.listdir(empty_cwd) == []


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("damage", ["a listed file missing", "the mark a link", "the mark names ../victim.txt",
                                    "the mark names an absolute path", "a listed file is a link"])
def test_a_folder_whose_mark_is_not_sound_is_not_read(reader, damage, sources, tmp_path, empty_cwd):
    """A mark proves who wrote a folder only where it is sound: a file it lists is missing (a deleted config.json
    used to train in silence), the mark is a link, it names a path outside the folder, or it lists a link."""
    kind = READERS[reader][1]
    folder = copy_of(sources, kind, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's")
    mark = json.loads((folder / MARKER).read_text())
    if damage == "a listed file missing":
        (folder / "config.json").unlink()
    elif damage == "the mark a link":
        (tmp_path / "elsewhere").write_text(json.dumps(mark))
        (folder / MARKER).unlink()
        (folder / MARKER).symlink_to(tmp_path / "elsewhere")
    elif damage.startswith("the mark names"):
        name = "../victim.txt" if "../" in damage else str(victim)
        (folder / MARKER).write_text(json.dumps({**mark, "files": {**mark["files"], name: sha256(victim)}}))
    else:
        (tmp_path / "summary.json").write_bytes((folder / "summary.json").read_bytes())
        (folder / "summary.json").unlink()
        (folder / "summary.json").symlink_to(tmp_path / "summary.json")
    fragment = {"a listed file missing": "config.json is missing", "the mark a link": "is a link",
                "a listed file is a link": "summary.json is a link"}.get(damage, "not a file inside the folder")
    one_line(read(reader, folder), 2, fragment)
    assert os.listdir(empty_cwd) == [] and victim.read_text() == "the user's"


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("name", ["config.json", "summary.json"])
def test_json_nested_100000_deep_under_a_rewritten_mark_is_one_line(reader, name, sources, tmp_path, empty_cwd):
    """config.json or summary.json nested 100,000 deep, the mark rewritten to match: one line naming the file
    (was `RecursionError`, a traceback)."""
    folder = copy_of(sources, READERS[reader][1], tmp_path)
    (folder / name).write_text("[" * 100_000 + "]" * 100_000)
    rewrite_mark(folder)
    one_line(read(reader, folder), 2, name, "nested deeper")
    assert os.listdir(empty_cwd) == []


def test_the_depth_limit_lets_the_labs_own_files_through_and_stops_one_level_past_it(tmp_path):
    """`JSON_DEPTH` levels are read; one more is refused (the limit is the boundary, not a guess)."""
    from lab.files.lab_folders import JSON_DEPTH, read_json

    (tmp_path / "ok.json").write_text("[" * JSON_DEPTH + "]" * JSON_DEPTH)
    assert read_json(tmp_path / "ok.json", "here") is not None
    (tmp_path / "deep.json").write_text("[" * (JSON_DEPTH + 1) + "]" * (JSON_DEPTH + 1))
    with pytest.raises(ValueError, match="nested deeper"):
        read_json(tmp_path / "deep.json", "here")


PAIRS_DAMAGE = {
    "a token out of range": (lambda rows: rows[:1] + [rows[1].replace(",0 ", ",9 ", 1)] + rows[2:], "token 9"),
    "a letter": (lambda rows: rows[:1] + ["0,a 1 2,0 1 2"] + rows[2:], "whole numbers"),
    "a wrong header": (lambda rows: ["prompt,winner,loser"] + rows[1:], "first line"),
    "a row of the wrong length": (lambda rows: rows[:1] + ["0,1 2,0 1 2"] + rows[2:], "3 tokens"),
    "a huge prompt index": (lambda rows: rows[:1] + ["99999999999999999999," + rows[1].split(",", 1)[1]] + rows[2:],
                            "the prompt must be 0"),
    "a row too many": (lambda rows: rows + [rows[-1]], "more than"),
    "a row too few": (lambda rows: rows[:-1], "pairs, the folder's config.json says"),
}


@pytest.mark.parametrize("reader", [r for r, (_, kind) in READERS.items() if kind == "rm"])
@pytest.mark.parametrize("damage", PAIRS_DAMAGE)
def test_a_damaged_pairs_csv_under_a_rewritten_mark_is_one_line_naming_the_line(reader, damage, sources, tmp_path,
                                                                                empty_cwd):
    """pairs.csv edited and the mark rewritten: a token out of range, a letter, a wrong header, a row of the wrong
    length, a prompt index of 20 digits, one row too many or too few: one line naming pairs.csv (was `index 9 is out
    of bounds`, `invalid literal for int()`, `expanded size of the tensor`, or accepted)."""
    folder = copy_of(sources, "rm", tmp_path)
    edit, fragment = PAIRS_DAMAGE[damage]
    rows = (folder / "pairs.csv").read_text().splitlines()
    if damage == "a token out of range" and ",0 " not in rows[1]:
        rows[1] = "0,0 1 2,0 1 2"
    (folder / "pairs.csv").write_text("\n".join(edit(rows)) + "\n")
    rewrite_mark(folder)
    one_line(read(reader, folder), 2, "pairs.csv", fragment)
    assert os.listdir(empty_cwd) == []


@pytest.mark.parametrize("reader", [r for r, (_, kind) in READERS.items() if kind == "rm"])
@pytest.mark.parametrize("damage, fragment", [("nan", "inf or NaN"), ("float32", "float64"),
                                              ("another shape", "not the model its config.json describes")])
def test_a_changed_model_pt_under_a_rewritten_mark_is_one_line(reader, damage, fragment, sources, tmp_path, empty_cwd):
    """model.pt changed and the mark rewritten (a NaN, float32, another model's shapes): refused for --reward learned:
    and --pairs-from alike (--pairs-from used to train on such a folder and report)."""
    folder = copy_of(sources, "rm", tmp_path)
    state = torch.load(folder / "model.pt", weights_only=True)
    if damage == "nan":
        state["out"][0] = math.nan
    elif damage == "float32":
        state = {k: v.float() for k, v in state.items()}
    else:
        state["bias"] = torch.zeros(3, dtype=torch.float64)
    torch.save(state, folder / "model.pt")
    rewrite_mark(folder)
    one_line(read(reader, folder), 2, "model.pt", fragment)
    assert os.listdir(empty_cwd) == []


@pytest.mark.parametrize("reader", [r for r, (_, kind) in READERS.items() if kind == "run"])
@pytest.mark.parametrize("damage, fragment", [("nan", "NaN or inf"), ("another run's", "not a policy of this run")])
def test_a_policy_pt_that_is_not_finite_or_not_the_runs_is_one_line(reader, damage, fragment, sources, tmp_path,
                                                                    empty_cwd):
    """policy.pt holding NaN (--demos-from used to train SFT on its samples), or a policy of another width than the
    run's config.json says (diagnose used to write a figure of it), the mark rewritten to match: one line."""
    folder = copy_of(sources, "run", tmp_path)
    if damage == "nan":
        state = torch.load(folder / "policy.pt", weights_only=True)
        state["decode"].view(-1)[0] = math.nan
        torch.save(state, folder / "policy.pt")
    else:
        save_policy(make_policy("factorized", 5, 3, 3, dim=4), folder / "policy.pt")
    rewrite_mark(folder)
    one_line(read(reader, folder), 2, "policy.pt", fragment)
    assert os.listdir(empty_cwd) == []


@pytest.mark.parametrize("reader", READERS)
def test_a_file_where_a_folder_is_read_is_one_line(reader, tmp_path, empty_cwd):
    """Kind before content: a file named where a folder is read is refused as not a folder."""
    (tmp_path / "file").write_text("the user's")
    one_line(read(reader, tmp_path / "file"), 2, "not a folder")
    assert (tmp_path / "file").read_text() == "the user's" and os.listdir(empty_cwd) == []


CONFIG_DAMAGE = {
    "no config object": (lambda data: {k: v for k, v in data.items() if k != "config"}, '"config"'),
    "a prompt token outside the vocabulary": (lambda data: {**data, "task": {**data["task"], "prompts": [[9, 1, 0]]}},
                                              "must lie in 0..4"),
    "prompts of two lengths": (lambda data: {**data, "task": {**data["task"], "prompts": [[1, 0, 2], [1, 0]]}},
                               "one length"),
}


@pytest.mark.parametrize("reader", [r for r, (_, kind) in READERS.items() if kind == "run"])
@pytest.mark.parametrize("damage", CONFIG_DAMAGE)
def test_a_run_config_json_of_the_wrong_shape_under_a_rewritten_mark_is_one_line(reader, damage, sources, tmp_path,
                                                                                 empty_cwd):
    """A run's config.json edited (no "config", a prompt token outside the vocabulary, prompts of two lengths) and the
    mark rewritten: every run reader names config.json and the field."""
    folder = copy_of(sources, "run", tmp_path)
    edit, fragment = CONFIG_DAMAGE[damage]
    (folder / "config.json").write_text(json.dumps(edit(json.loads((folder / "config.json").read_text()))))
    rewrite_mark(folder)
    one_line(read(reader, folder), 2, "config.json", fragment)
    assert os.listdir(empty_cwd) == []


PARSERS = ("torch.load(", "json.loads(", "csv.reader(", "csv.DictReader(")
READER_MODULES = {
    "lab/files/lab_folders.py", "lab/files/run_folder.py", "lab/files/start_folder.py",
    "lab/files/reward_model_folder.py",  # the readers, one per kind of folder
    "lab/files/output_folders.py", "lab/figures/figure_files.py",  # the marks (checked for soundness there)
    "lab/training/kinds.py", "lab/training/preference_pairs.py",  # after the command's reader: policy.pt, pairs.csv
    "lab/policies/__init__.py",  # load_policy: the Python API's, for a policy.pt the user names
    "lab/cli/options.py", "lab/cli/task_options.py", "tasks/sorting.py",  # a --prompts JSON list typed on the
    "tasks/prompts.py",  # command line, not a file
}


def test_only_the_readers_parse_a_folders_files():
    """One reader per kind of folder, so that a new command cannot read a folder unchecked: no other module of the
    lab parses JSON, CSV or a torch file (a new `json.loads` in a command module fails this test)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    parsing = {str(path.relative_to(root)) for pattern in ("lab/**/*.py", "tasks/**/*.py") for path in root.glob(pattern)
               if any(parser in path.read_text() for parser in PARSERS)}
    assert parsing <= READER_MODULES, sorted(parsing - READER_MODULES)
