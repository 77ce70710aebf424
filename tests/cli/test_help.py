"""`lab --help` shows every command's whole first line and the exit codes; `--version`; choice errors read
like the lab's other errors ("Value error, 'centred' is not one of ..." before)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from tests.cli.cli_tools import one_line


def test_the_command_list_is_shown_whole_with_the_exit_codes():
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"})
    commands = result.output.split("Commands:")[1]
    assert result.exit_code == 0 and "..." not in commands
    flat = " ".join(result.output.split())
    assert "summary.json, policy.pt and curves.png." in flat and "sweeps of R runs (CPU, CUDA)" in flat
    assert "130 interrupted by Ctrl-C, 143 by SIGTERM" in flat


def test_version_prints_the_packages_version():
    from importlib.metadata import version
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip().endswith(version("grpo-sorting-lab"))


@pytest.mark.parametrize("args, line", [
    (["run", "--delta", "centred"], "--delta centred is not a choice; choose one of: raw, centered, normalized"),
    (["sweep", "--delta", "raw", "--delta", "centred"], "--delta centred is not a choice"),
    (["run", "--reward", "bogus"], "--reward bogus is not a choice; choose one of: distance, inclusion-ordering"),
    (["sweep", "--format", "xls"], "--format xls is not a choice; choose one of: parquet, csv"),
    (["run", "--loss", "dpo", "--pairs", "both"], "--pairs both is not a choice; choose one of: online, offline"),
])
def test_a_bad_choice_names_the_option_the_value_and_the_choices(args, line):
    message = one_line(CliRunner().invoke(app, args), 2, line)
    assert "Value error" not in message and "Invalid value" not in message
