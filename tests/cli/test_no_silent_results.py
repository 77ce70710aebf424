"""No result the settings make meaningless is reported in silence, and every message names what was typed (issue 34).

    --kl-period of 310 digits, --loss dpo --kl 1e-300 (kl_to_optimum inf in every row), --max-grad-norm 1e-300 (0 in
    float32: every run frozen), --reward-threshold above the optimum (expert iteration keeps nothing), and --out the
    folder --init-from or --demos-from reads (--force replaced the start; its rerun line then started elsewhere):
    each used to exit 0; now one line, exit 2, nothing written.
    Messages: lab sweep takes --pairs-from without --pairs offline (it implies it, as in lab run); lab reproduce
    --out file.svg names file.svg, not file.svg/RESULTS.md; a prompt-length mismatch of a factorised start is one
    line, not a second that points to --max-length, and every line of a multi-line error starts with Error:.

Mutants tried: `MIN_BETA`, `MIN_GRAD_NORM` and `MAX_KL_PERIOD` checks removed from `RANGES`, `check_thresholds`
and `check_not_read` left out of `lab.cli.jobs.prepare`, the sweep's implied `--pairs offline` removed: each fails
a case here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import lab.experiments.reproduce as reproduction
from lab.cli.commands import app
from tests.cli.cli_tools import one_line

SHORT = ["--epochs", "1", "--steps", "1", "--quiet", "--device", "cpu"]


def lab(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    folder = tmp_path_factory.mktemp("start") / "run"
    assert lab("run", *SHORT, "--out", folder).exit_code == 0
    return folder


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("args, fragment", [
    (["--kl-period", "1" + "0" * 310], "--kl-period must be >= 0 (0 = frozen reference) and at most 2147483647"),
    (["--loss", "dpo", "--kl", "1e-300"], "at least 1e-30"),
    (["--max-grad-norm", "1e-300"], "at least 1e-06"),
    (["--loss", "expert-iteration", "--ei-filter", "threshold", "--reward-threshold", "6"], "best reward any response"),
], ids=["kl-period-310-digits", "dpo-beta-1e-300", "max-grad-norm-1e-300", "threshold-above-optimum"])
@pytest.mark.parametrize("command", [["run"], ["sweep", "--seeds", "1"]])
def test_a_setting_whose_result_could_not_mean_anything_is_one_line(command, args, fragment):
    one_line(lab(*command, *SHORT, *args), 2, fragment)
    assert os.listdir() == []


@pytest.mark.parametrize("args", [["--kl-period", "2147483647"], ["--max-grad-norm", "1e-6"],
                                  ["--loss", "expert-iteration", "--ei-filter", "threshold", "--reward-threshold", "5"]])
def test_the_bounds_admit_their_limits(args):
    """The other side: each bound's own value trains (a bound shown able to accept)."""
    result = lab("run", *SHORT, *args, "--out", "ok")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("command", [["run"], ["sweep", "--seeds", "1"]])
@pytest.mark.parametrize("option", [["--init-from"], ["--loss", "sft", "--demos", "policy", "--demos-from"]],
                         ids=["init-from", "demos-from"])
def test_out_is_never_the_folder_the_job_reads(command, option, start):
    before = {p.name: p.read_bytes() for p in start.iterdir()}
    one_line(lab(*command, *SHORT, *option, start, "--out", start, "--force"), 2, "reads")
    assert {p.name: p.read_bytes() for p in start.iterdir()} == before


def test_sweep_pairs_from_implies_offline_pairs_as_run_does(tmp_path):
    rm = tmp_path / "rm"
    assert lab("reward-model", "--size", "small", "--pairs-per-prompt", "2", "--steps", "2", "--quiet",
               "--out", rm).exit_code == 0
    result = lab("sweep", *SHORT, "--seeds", "1", "--loss", "dpo", "--kl", "0.1", "--pairs-from", rm, "--out", "s")
    assert result.exit_code == 0, result.output


def test_reproduce_out_a_file_names_the_file(monkeypatch):
    Path("file.svg").write_text("mine")
    monkeypatch.setattr(reproduction, "run_reproduction",
                        lambda *a, **k: pytest.fail("the reproduction started"))
    line = one_line(lab("reproduce", "--seeds", "6", "--quiet", "--out", "file.svg"), 2, "--out file.svg")
    assert "RESULTS.md" not in line and Path("file.svg").read_text() == "mine"


def test_a_prompt_length_mismatch_of_a_factorised_start_is_one_line(start):
    """Its response length is its prompt length: one line names --prompt-length, none points to --max-length."""
    one_line(lab("run", *SHORT, "--init-from", start, "--prompts", "random", "--prompt-length", "4"), 2,
             "prompt length 3", "--prompt-length")


def test_every_line_of_a_several_line_error_starts_with_error(start):
    result = lab("run", *SHORT, "--init-from", start, "--dim", "12", "--vocab-size", "6")
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 2 and all(line.startswith("Error: ") for line in lines)
