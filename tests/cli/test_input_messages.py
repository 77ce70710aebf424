"""Bad values end in one line naming the option as typed; odd but legal values work in every command."""

from __future__ import annotations

import os
import sys

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.experiments.intervals import mean_interval
from tests.cli.cli_tools import one_line

SHORT = ["--epochs", "1", "--steps", "1", "--quiet"]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)




@pytest.mark.parametrize("prompts, fragments", [
    ("[" * 1100 + "]" * 1100, ("cannot read prompts",)),
    ("[[99999999999999999999999,1]]", ("must lie in 0..4", "99999999999999999999999")),
    ("[[-99999999999999999999999,1]]", ("must lie in 0..4",)),
])
def test_prompts_nested_too_deep_or_past_int64_are_one_line(tmp_path, prompts, fragments):
    """Used to be a 60-line RecursionError, or torch's "Overflow when unpacking long long"."""
    message = one_line(CliRunner().invoke(app, ["run", *SHORT, "--prompts", prompts]), 2, *fragments)
    assert len(message) < 400 and "Overflow" not in message
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("args, option", [
    (["--init-scale", "0"], "--init-scale must be > 0"),
    (["--entropy-coef", "-1"], "--entropy-coef must be >= 0"),
    (["--policy", "autoregressive", "--max-length", "0"], "--max-length must be a positive integer"),
    (["--max-length", "3"], "--max-length applies to the autoregressive policy"),
])
def test_errors_name_the_option_as_typed_not_the_field(args, option):
    for command in (["run"], ["sweep", "--seeds", "1"]):
        message = one_line(CliRunner().invoke(app, [*command, *SHORT, *args]), 2, option)
        assert "init_scale" not in message and "entropy_coef" not in message and "max_length" not in message


def test_a_huge_init_scale_that_diverges_at_once_advises_a_smaller_init_scale(tmp_path):
    result = CliRunner().invoke(app, ["run", *SHORT, "--init-scale", "1e30", "--out", "r"])
    assert result.exit_code == 3
    assert "smaller --init-scale (now 1e+30" in result.output and "smaller --lr" not in result.output


def test_one_seed_has_no_t_interval_not_a_point(tmp_path):
    """With one surviving seed the 95% t interval is undefined: n/a in the table, empty cells in summary.csv."""
    one = mean_interval([3.0])
    assert one.text(2) == "3.00 [n/a]" and not one.excludes(2.0)
    result = CliRunner().invoke(app, ["sweep", "--epochs", "1", "--steps", "1", "--seeds", "1", "--out", "s"])
    assert result.exit_code == 0, result.output
    assert "[n/a]" in result.output
    header, row = (tmp_path / "s" / "summary.csv").read_text().splitlines()[:2]
    cells = dict(zip(header.split(","), row.split(",")))
    assert cells["final_mean_reward"] != "" and cells["final_mean_reward_low"] == cells["final_mean_reward_high"] == ""
    two = mean_interval([3.0, 4.0])
    assert two.low < 3.5 < two.high


@pytest.mark.skipif(sys.platform != "linux", reason="names that are not UTF-8 are a POSIX matter")
def test_a_sweep_into_a_folder_whose_name_is_not_utf8_writes_its_tables(tmp_path):
    """`lab sweep --out $'sw\\xe9'` used to train fully, then fail in pyarrow with a UnicodeEncodeError."""
    name = os.fsdecode(b"sw\xe9")
    for fmt in ("parquet", "csv"):
        result = CliRunner().invoke(app, ["sweep", *SHORT, "--seeds", "1", "--out", name, "--force",
                                          "--format", fmt])
        assert result.exit_code == 0, result.output
        assert f"metrics_step.{fmt}" in os.listdir(tmp_path / name)


def test_dpo_options_in_a_sweep_with_dpo_apply_to_its_dpo_points():
    """`lab sweep --loss dpo --loss naive --dpo-loss ipo` used to say "add --loss dpo", which was given."""
    result = CliRunner().invoke(app, ["sweep", *SHORT, "--seeds", "1", "--loss", "dpo", "--loss", "naive",
                                      "--dpo-loss", "ipo", "--kl", "0.1", "--out", "s"])
    assert result.exit_code == 0, result.output
    one_line(CliRunner().invoke(app, ["sweep", *SHORT, "--seeds", "1", "--dpo-loss", "ipo"]), 2,
             "--dpo-loss applies to --loss dpo only")


@pytest.mark.parametrize("args, option", [
    (["--kl", "1e300"], "--kl 1e+300 is the likely cause: try a smaller --kl"),
    (["--entropy-coef", "1e300"], "--entropy-coef 1e+300 is the likely cause"),
    (["--delta", "gae", "--critic-lr", "1e300"], "--critic-lr 1e+300 is the likely cause"),
    (["--temperature", "1e-40"], "--temperature 1e-40 is the likely cause: try a larger --temperature"),
])
def test_a_divergence_names_the_setting_at_fault(args, option):
    """These used to be told "try a smaller --lr"."""
    result = CliRunner().invoke(app, ["run", "--epochs", "2", "--steps", "2", "--quiet", *args, "--out", "r"])
    message = one_line(result, 3, option)
    assert "--lr" not in message
