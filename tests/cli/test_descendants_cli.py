"""`lab run` and `lab sweep` with GRPO's descendants (issue 37): each option reaches config.json, the default name
and the sweep's columns; a value that does not apply or is out of range is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from tests.cli.cli_tools import one_line

SHORT = ["--epochs", "2", "--steps", "2", "--quiet", "--device", "cpu"]


def lab(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_a_descendant_run_writes_its_settings_and_names_its_folder_by_them():
    """CISPO's filled cap and the options given are in config.json and in the default folder name; the rerun line
    carries them."""
    result = lab("run", *SHORT, "--delta", "centered", "--loss", "cispo", "--importance-sampling-level", "sequence",
                 "--top-entropy-quantile", "0.5")
    assert result.exit_code == 0, result.output
    (folder,) = os.listdir("runs")
    assert folder.startswith("centered-cispo-inclusion-ordering") and "epsilon-high5" in folder
    assert "importance-sampling-levelsequence" in folder and "top-entropy-quantile0.5" in folder
    config = json.loads(open(f"runs/{folder}/config.json").read())
    assert (config["config"]["epsilon_high"], config["config"]["importance_sampling_level"],
            config["config"]["top_entropy_quantile"]) == (5.0, "sequence", 0.5)
    assert "--loss cispo" in config["rerun"] and "--epsilon-high 5.0" in config["rerun"]


def test_a_sweep_gives_each_loss_the_settings_it_reads():
    """--loss clipped --loss sapo --epsilon-high 0.28 --epsilon-high 0.5: the clipped points take both bounds, the
    SAPO point neither (it does not read it), and --sapo-temperature-neg reaches the SAPO point only."""
    result = lab("sweep", *SHORT, "--seeds", "1", "--delta", "centered", "--loss", "clipped", "--loss", "sapo",
                 "--epsilon-high", "0.28", "--epsilon-high", "0.5", "--sapo-temperature-neg", "2", "--format", "csv",
                 "--out", "sw")
    assert result.exit_code == 0, result.output
    rows = open("sw/summary.csv").read().splitlines()
    header = rows[0].split(",")
    points = [dict(zip(header, row.split(","))) for row in rows[1:]]
    assert sorted((p["loss"], p["epsilon_high"]) for p in points) == [("clipped", "0.28"), ("clipped", "0.5"),
                                                                      ("sapo", "")]
    config = json.loads(open("sw/config.json").read())
    assert config["grid"]["sapo_temperature_neg"] == [None, 2.0] or config["grid"]["sapo_temperature_neg"] == [2.0,
                                                                                                               None]


@pytest.mark.parametrize("command", [["run"], ["sweep", "--seeds", "1"]])
@pytest.mark.parametrize("args, fragment", [
    (["--loss", "naive", "--epsilon-high", "0.3"], "--epsilon-high applies to --loss clipped or cispo or luspo only"),
    (["--loss", "clipped", "--clip-delta", "0.5"], "--clip-delta must be > 1 and finite"),
    (["--loss", "luspo"], "--loss luspo is GSPO's loss summed over each response's tokens"),
    (["--mask-truncated-completions"], "--mask-truncated-completions applies to the autoregressive policy only"),
    (["--loss", "clipped", "--top-entropy-quantile", "2"], "--top-entropy-quantile must lie in [0, 1]"),
    (["--importance-sampling-level", "tokens"], "tokens"),
])
def test_a_descendant_setting_that_cannot_apply_is_one_line(command, args, fragment):
    one_line(lab(*command, *SHORT, *args), 2, fragment)
    assert os.listdir() == []
