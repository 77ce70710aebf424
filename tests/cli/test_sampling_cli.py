"""Issue 38's options in `lab run` and `lab sweep`: recorded in config.json and the metrics, refused in one line."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from tests.cli.cli_tools import one_line

SHORT = ["--epochs", "2", "--steps", "2", "--quiet"]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_run_records_each_setting_with_its_defaults_and_metrics(policy):
    """A run with a stale sampler, a token-truncate correction, the off-policy mask, dynamic sampling and a synced
    reference writes them (and TRL's defaults it filled: clip max 3, alpha 0.6, 512 steps; the cap 10) to
    config.json, its rerun command names them, and metrics.csv has their columns."""
    args = ["run", *SHORT, "--policy", policy, "--delta", "centered", "--loss", "clipped", "--staleness", "2",
            "--importance-sampling-correction", "token-truncate", "--off-policy-mask-threshold", "0.1",
            "--dynamic-sampling", "--sync-ref-model", "--kl", "0.1", "--kl-period", "0", "--out", "r"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = json.load(open("r/config.json"))
    config = saved["config"]
    assert (config["staleness"], config["importance_sampling_clip_max"], config["ref_model_mixup_alpha"],
            config["ref_model_sync_steps"], config["max_num_gen_batches"]) == (2, 3.0, 0.6, 512, 10)
    for flag in ("--staleness 2", "--dynamic-sampling", "--sync-ref-model", "--off-policy-mask-threshold 0.1"):
        assert flag in saved["rerun"]
    columns = pd.read_csv("r/metrics.csv").columns
    assert {"groups_drawn", "groups_kept", "groups_discarded", "importance_weight_mean",
            "off_policy_kept_fraction"} <= set(columns)


def test_a_run_without_them_writes_none_of_them():
    """The defaults leave config.json and metrics.csv as they were (no field, no column of issue 38)."""
    assert CliRunner().invoke(app, ["run", *SHORT, "--out", "r"]).exit_code == 0
    assert "staleness" not in json.load(open("r/config.json"))["config"]
    assert "groups_drawn" not in pd.read_csv("r/metrics.csv").columns


@pytest.mark.parametrize("args, fragments", [
    (["--importance-sampling-correction", "token-mask"], ("--staleness K or --sampler-temperature",)),
    # the sampler at the policy's own temperature is the policy: this used to end in a TypeError traceback
    (["--sampler-temperature", "1", "--importance-sampling-correction", "token-truncate"],
     ("is the policy's own --temperature", "nothing to reweigh")),
    (["--temperature", "0.5", "--sampler-temperature", "0.5", "--importance-sampling-correction", "sequence-mask"],
     ("is the policy's own --temperature",)),
    (["--staleness", "-1"], ("--staleness must be an integer >= 0",)),
    (["--sync-ref-model"], ("add --kl > 0",)),
    (["--sync-ref-model", "--kl", "0.1"], ("add --kl-period 0",)),
    (["--ref-model-mixup-alpha", "0.5"], ("applies to --sync-ref-model only",)),
    (["--sync-ref-model", "--kl", "0.1", "--kl-period", "0", "--ref-model-mixup-alpha", "1.5"], ("(0, 1]",)),
    (["--adaptive-entropy", "--policy", "autoregressive"], ("--policy factorized",)),
    (["--entropy-target", "0.5"], ("applies to --adaptive-entropy only",)),
    (["--dynamic-sampling", "--max-num-gen-batches", "0"], ("positive integer",)),
    (["--staleness", "1", "--importance-sampling-correction", "token-mask", "--importance-sampling-clip-min", "2",
      "--importance-sampling-clip-max", "1"], ("above --importance-sampling-clip-min",)),
    (["--off-policy-mask-threshold", "0.1", "--delta", "gae"], ("--delta gae",)),
    (["--staleness", "1", "--importance-sampling-correction", "sequence-mask", "--importance-sampling-clip-max",
      "inf"], ("finite",)),
    (["--dynamic-sampling", "--loss", "dpo", "--kl", "0.1"], ("policy-gradient",)),
])
def test_wrong_settings_are_one_line_and_write_nothing(tmp_path, args, fragments):
    result = CliRunner().invoke(app, ["run", *SHORT, *args, "--out", "r"])
    one_line(result, 2, *fragments)
    assert not (tmp_path / "r").exists()


def test_sweep_takes_the_switches_as_grid_axes_and_their_settings_for_the_switched_points():
    """`--dynamic-sampling true --dynamic-sampling false` is a grid axis; --max-num-gen-batches applies to the
    points with it on (the others keep none); the tables carry the counts."""
    args = ["sweep", *SHORT, "--seeds", "1", "--delta", "centered", "--dynamic-sampling", "true",
            "--dynamic-sampling", "false", "--max-num-gen-batches", "4", "--out", "s"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    table = pd.read_parquet("s/metrics_epoch.parquet")
    assert set(table["config_dynamic_sampling"]) == {True, False} and "groups_drawn" in table.columns
    lone = CliRunner().invoke(app, ["sweep", *SHORT, "--seeds", "1", "--max-num-gen-batches", "4", "--out", "t"])
    one_line(lone, 2, "--max-num-gen-batches applies to --dynamic-sampling only")
