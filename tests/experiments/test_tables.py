"""A sweep's metrics tables (lab.files.tables): names that never clash, epoch metrics once per epoch, both formats."""

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.training.config import ALWAYS_COLUMNS, TrainConfig
from lab.training.records import EPOCH_METRICS, INDEX_COLUMNS, STEP_METRICS
from lab.experiments.sweep import build_grid, run_sweep
from lab.files.tables import epoch_table, read_table, step_table, table_names, write_tables
from tasks.sorting import make_task


GRID_FIELDS = (*ALWAYS_COLUMNS, "temperature", "kl_estimator", "kl_in")
"""Settings the tables below carry as columns (every run's, whatever the grid)."""


@pytest.fixture(scope="module")
def records():
    configs = build_grid(TrainConfig(epochs=3, steps=2), {"kl": [0.0, 0.1], "loss": ["naive", "clipped"]}, seeds=2)
    return run_sweep(make_task(), configs)


def test_no_column_name_appears_twice_and_no_setting_is_named_like_a_metric(records):
    """No name is both a grid column and a metric column of the same file (as `loss` and `kl` once were)."""
    for table in (step_table(records, GRID_FIELDS), epoch_table(records, GRID_FIELDS)):
        names = table.column_names
        assert len(names) == len(set(names))
        settings = [n for n in names if n.startswith("config_")]
        assert settings == [f"config_{f}" for f in GRID_FIELDS]
        assert not {n.removeprefix("config_") for n in settings} & {"run", "seed"}
    assert {"loss", "kl"} <= set(GRID_FIELDS)  # the clash the prefix resolves
    assert step_table(records, GRID_FIELDS).column_names == [
        "run", "seed", *(f"config_{f}" for f in GRID_FIELDS), *INDEX_COLUMNS, *STEP_METRICS]
    assert epoch_table(records, GRID_FIELDS).column_names == [
        "run", "seed", *(f"config_{f}" for f in GRID_FIELDS), "epoch", *EPOCH_METRICS]


def test_each_row_holds_its_runs_settings_and_values(records):
    steps, epochs = step_table(records, GRID_FIELDS).to_pydict(), epoch_table(records, GRID_FIELDS).to_pydict()
    runs, total = records.step_metrics["loss"].shape
    assert len(steps["run"]) == runs * total and len(epochs["run"]) == runs * 3  # epochs stored once each
    for run, config in enumerate(records.configs):
        rows = slice(run * total, (run + 1) * total)
        assert set(steps["run"][rows]) == {run} and set(steps["seed"][rows]) == {config.seed}
        assert set(steps["config_kl"][rows]) == {config.kl} and set(steps["config_loss"][rows]) == {config.loss.value}
        assert steps["step"][rows] == list(range(total))
        assert steps["epoch"][rows] == [s // 2 for s in range(total)]
        assert steps["inner_step"][rows] == [s % 2 for s in range(total)]
        for name in STEP_METRICS:  # float32 values, stored exactly
            np.testing.assert_array_equal(np.float32(steps[name][rows]), records.step_metrics[name][run], err_msg=name)
        e = slice(run * 3, (run + 1) * 3)
        assert epochs["epoch"][e] == [0, 1, 2]
        np.testing.assert_array_equal(np.float32(epochs["mean_reward"][e]), records.epoch_metrics["mean_reward"][run])
    assert set(epochs["heldout_greedy_reward"]) == {None}  # no held-out prompts: null, not a number


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_both_formats_read_back_to_the_records(records, tmp_path, fmt):
    paths = write_tables(records, GRID_FIELDS, tmp_path, fmt)
    assert [p.name for p in paths] == list(table_names(fmt)) == [f"metrics_step.{fmt}", f"metrics_epoch.{fmt}"]
    steps, epochs = read_table(paths[0]), read_table(paths[1])
    for name in STEP_METRICS:
        np.testing.assert_array_equal(steps[name].astype(np.float32), records.step_metrics[name].reshape(-1))
    for name in EPOCH_METRICS:
        np.testing.assert_array_equal(epochs[name].astype(np.float32), records.epoch_metrics[name].reshape(-1))
    assert list(steps["config_loss"][:6]) == ["naive"] * 6
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(table_names(fmt))  # no temporary left


def test_a_parquet_table_loads_in_one_line_with_pyarrow(records, tmp_path):
    step_path, _ = write_tables(records, GRID_FIELDS, tmp_path)
    table = pq.read_table(step_path)
    assert table.num_rows == records.num_runs * 6 and table.schema.field("loss").type == "float"
    setting = table.schema.field("config_loss").type  # text settings: dictionary-encoded strings (pandas: category)
    assert str(setting.value_type) == "string" and set(table.column("config_loss").to_pylist()) == {
        c.loss.value for c in records.configs}


def test_lab_sweep_writes_parquet_by_default_and_csv_on_request(tmp_path):
    runner = CliRunner()
    base = ["sweep", "--kl", "0", "--kl", "0.1", "--seeds", "2", "--epochs", "2", "--steps", "2", "--quiet"]
    assert runner.invoke(app, [*base, "--out", str(tmp_path / "p")]).exit_code == 0
    result = runner.invoke(app, [*base, "--out", str(tmp_path / "c"), "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert {"metrics_step.parquet", "metrics_epoch.parquet"} <= {p.name for p in (tmp_path / "p").iterdir()}
    assert {"metrics_step.csv", "metrics_epoch.csv"} <= {p.name for p in (tmp_path / "c").iterdir()}
    assert not any(p.name == "metrics.csv" for p in (tmp_path / "p").iterdir())
    header = (tmp_path / "c" / "metrics_step.csv").read_text().splitlines()[0].replace('"', "").split(",")
    assert len(header) == len(set(header)) and "config_kl" in header and "kl" in header
    parquet, text = read_table(tmp_path / "p" / "metrics_epoch.parquet"), read_table(tmp_path / "c" / "metrics_epoch.csv")
    np.testing.assert_array_equal(parquet["mean_reward"], text["mean_reward"].astype(np.float32))
    summary = (tmp_path / "p" / "summary.csv").read_text().splitlines()[0].split(",")
    assert summary[0] == "kl" and len(summary) == len(set(summary))  # settings by plain name, no clash


def test_an_unknown_format_exits_2_with_one_line(tmp_path):
    result = CliRunner().invoke(app, ["sweep", "--format", "xlsx", "--out", str(tmp_path / "s")])
    assert result.exit_code == 2 and "xlsx" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "s").exists()
