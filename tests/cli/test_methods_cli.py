"""`lab run` and `lab sweep` with the methods before RL: --loss sft, --loss expert-iteration, --max-grad-norm.

Each works in both commands and both policies; a bad value or a setting of another method is one line, exit 2,
and nothing is written.
"""

from __future__ import annotations

import csv
import json
import os

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from tests.cli.cli_tools import one_line

SHORT = ["--epochs", "2", "--steps", "2", "--quiet", "--device", "cpu"]
METHODS = {
    "sft": ["--loss", "sft", "--demos", "noisy", "--demo-noise", "0.3"],
    "expert-iteration": ["--loss", "expert-iteration", "--ei-filter", "threshold", "--reward-threshold", "2"],
    "clipped-gradient": ["--delta", "centered", "--max-grad-norm", "0.5"],
}


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_method_runs_in_both_commands_and_both_policies(tmp_path, name, policy):
    result = CliRunner().invoke(app, ["run", *SHORT, *METHODS[name], "--policy", policy, "--out", "r"])
    assert result.exit_code == 0, result.output
    columns = next(csv.reader(open(tmp_path / "r" / "metrics.csv")))
    wanted = "grad_norm" if name == "clipped-gradient" else "token_accuracy"
    assert wanted in columns
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    if name == "clipped-gradient":  # the fraction of steps clipped, from the steps' grad_clipped
        rows = list(csv.DictReader(open(tmp_path / "r" / "metrics.csv")))
        assert summary["grad_clipped_fraction"] == pytest.approx(
            sum(float(r["grad_clipped"]) for r in rows) / len(rows))
    else:
        assert "grad_clipped_fraction" not in summary
    config = json.loads((tmp_path / "r" / "config.json").read_text())["config"]
    assert config["loss"] == ("sft" if name == "sft" else "expert-iteration" if name == "expert-iteration"
                              else "naive")
    result = CliRunner().invoke(app, ["sweep", *SHORT, *METHODS[name], "--policy", policy, "--seeds", "2",
                                      "--format", "csv", "--out", "s"])
    assert result.exit_code == 0, result.output
    assert wanted in next(csv.reader(open(tmp_path / "s" / "metrics_step.csv")))


def test_a_sweep_compares_methods_with_each_methods_settings_on_its_own_points(tmp_path):
    result = CliRunner().invoke(app, ["sweep", *SHORT, "--loss", "sft", "--loss", "expert-iteration", "--loss",
                                      "clipped", "--demos", "noisy", "--ei-filter", "group-best", "--max-grad-norm",
                                      "1", "--max-grad-norm", "5", "--seeds", "1", "--format", "csv", "--out", "s"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(open(tmp_path / "s" / "metrics_epoch.csv")))
    points = {(r["config_loss"], r["config_demos"], r["config_ei_filter"], r["config_max_grad_norm"]) for r in rows}
    assert points == {(loss, demos, ei, norm) for norm in ("1", "5") for loss, demos, ei in
                      (("sft", "noisy", ""), ("expert-iteration", "", "group-best"), ("clipped", "", ""))}


@pytest.mark.parametrize("args, fragment", [
    (["--max-grad-norm", "0"], "--max-grad-norm must be > 0"),
    (["--loss", "sft", "--demo-noise", "0.1"], "--demo-noise applies to --demos noisy only"),
    (["--loss", "sft", "--demos", "noisy", "--demo-noise", "2"], "--demo-noise must lie in [0, 1]"),
    (["--loss", "expert-iteration", "--ei-filter", "threshold"], "--ei-filter threshold needs --reward-threshold"),
    (["--loss", "sft", "--kl", "0.1"], "--kl does not apply to --loss sft"),
])
def test_bad_values_are_one_line_and_write_nothing(tmp_path, args, fragment):
    for command in (["run"], ["sweep", "--seeds", "1"]):
        one_line(CliRunner().invoke(app, [*command, *SHORT, *args]), 2, fragment)
    assert os.listdir(tmp_path) == []


def test_a_methods_setting_without_its_method_is_one_line_in_both_commands(tmp_path):
    one_line(CliRunner().invoke(app, ["run", *SHORT, "--demos", "noisy"]), 2, "--demos applies to --loss sft only")
    one_line(CliRunner().invoke(app, ["sweep", *SHORT, "--seeds", "1", "--ei-filter", "group-best"]), 2,
             "--ei-filter applies to --loss expert-iteration only")
    assert os.listdir(tmp_path) == []
