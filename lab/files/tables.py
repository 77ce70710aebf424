"""A sweep's metrics as two tables a data-frame library reads in one line (Parquet, or CSV on request).

    metrics_step   one row per (run, optimizer step):  run, seed, config_*, epoch, step, inner_step, STEP_METRICS
    metrics_epoch  one row per (run, epoch):           run, seed, config_*, epoch, EPOCH_METRICS

`run` is the run's index in the sweep (the order of config.json's grid x seeds) and
joins the two tables with `epoch`. Each swept setting is a column `config_<field>`
(the `TrainConfig` field), so a setting never shares a name with a metric: `config_kl`
is beta, `kl` the measured KL; `config_loss` the loss mode, `loss` its value. Epoch
metrics are stored once per epoch, not repeated on its step rows. A missing value
(held-out metrics without held-out prompts) is null. The tables are built column
by column from the records' arrays, and written by pyarrow (`pyarrow.parquet`,
`pyarrow.csv`): no Python loop over rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lab.files.table_format import TableFormat
from lab.files.temporaries import atomic_path
from lab.training.records import (DPO_STEP_METRICS, EPOCH_METRICS, GRAD_CLIP_METRICS, METHOD_STEP_METRICS,
                                  SAMPLER_STEP_METRICS, STEP_METRICS, TRACKED_EPOCH_METRICS, Records,
                                  epoch_metric_names, is_critic_metric, step_metric_names)

SETTING_PREFIX = "config_"
"""A swept setting's column is this prefix + its `TrainConfig` field name."""

PARQUET_COMPRESSION = "zstd"
"""Metric columns are float32, stored byte-stream-split and zstd-compressed: a 1000-run sweep of the
lecture's setting takes about 20 MB (its CSV took 200 MB)."""


def setting_column(name: str) -> str:
    return SETTING_PREFIX + name


def run_columns(records: Records, names: Sequence[str]) -> dict[str, np.ndarray]:
    """One value per run: `run`, `seed`, then `config_<name>` for each setting in `names`."""
    configs = [c.plain() for c in records.configs]
    columns = {"run": np.arange(len(configs), dtype=np.int32), "seed": np.array([c["seed"] for c in configs])}
    for name in names:
        columns[setting_column(name)] = np.array([c[name] for c in configs])
    return columns


def step_table(records: Records, names: Sequence[str]):
    """The step table (a `pyarrow.Table`): rows run-major, then optimizer step."""
    runs, total = next(iter(records.step_metrics.values())).shape
    steps = records.configs[0].steps  # shared by every run of one table
    index = np.arange(total, dtype=np.int32)
    per_row = dict(epoch=np.tile(index // steps, runs), step=np.tile(index, runs),
                   inner_step=np.tile(index % steps, runs))
    per_row.update({m: records.step_metrics[m].reshape(-1) for m in step_metric_names(records)})  # critic's too
    return _arrow_table(run_columns(records, names), total, per_row)


def epoch_table(records: Records, names: Sequence[str]):
    """The epoch table (a `pyarrow.Table`): rows run-major, then epoch."""
    runs, epochs = next(iter(records.epoch_metrics.values())).shape
    per_row = {"epoch": np.tile(np.arange(epochs, dtype=np.int32), runs)}
    per_row.update({m: records.epoch_metrics[m].reshape(-1) for m in epoch_metric_names(records)})  # critic's too
    return _arrow_table(run_columns(records, names), epochs, per_row)


def _arrow_table(per_run: dict[str, np.ndarray], rows_per_run: int, per_row: dict[str, np.ndarray]):
    """Columns of one value per run (repeated on each of its rows), then columns of one value per row."""
    import pyarrow as pa

    columns = {}
    for name, values in per_run.items():
        if values.dtype.kind == "U":  # a setting's text: a few distinct values, stored once (dictionary-encoded)
            distinct, codes = np.unique(values, return_inverse=True)
            columns[name] = pa.DictionaryArray.from_arrays(np.repeat(codes.astype(np.int32), rows_per_run),
                                                           pa.array(distinct))
        else:
            columns[name] = pa.array(np.repeat(values, rows_per_run))
    for name, values in per_row.items():
        missing = np.isnan(values) if values.dtype.kind == "f" else None
        columns[name] = pa.array(values, mask=missing if missing is not None and missing.any() else None)
    return pa.table(columns)


def _write_parquet(table, path: Path) -> None:
    import pyarrow.parquet as pq

    metrics = [n for n in table.column_names
               if n in {**STEP_METRICS, **EPOCH_METRICS, **DPO_STEP_METRICS, **GRAD_CLIP_METRICS,
                        **METHOD_STEP_METRICS, **TRACKED_EPOCH_METRICS, **SAMPLER_STEP_METRICS} or is_critic_metric(n)]
    # measured floats rarely repeat: split their bytes for zstd instead of trying a dictionary
    pq.write_table(table, path, compression=PARQUET_COMPRESSION,
                   use_dictionary=[n for n in table.column_names if n not in metrics],
                   use_byte_stream_split=metrics)


def _write_csv(table, path: Path) -> None:
    import pyarrow.csv as pc

    pc.write_csv(table, path, pc.WriteOptions(quoting_style="needed"))


WRITERS = {TableFormat.parquet: _write_parquet, TableFormat.csv: _write_csv}


def table_names(fmt: TableFormat | str) -> tuple[str, str]:
    """The step and epoch tables' file names in a format."""
    suffix = TableFormat(fmt).value
    return f"metrics_step.{suffix}", f"metrics_epoch.{suffix}"


def write_tables(records: Records, names: Sequence[str], folder: Path,
                 fmt: TableFormat | str = TableFormat.parquet) -> list[Path]:
    """Write both tables into `folder`, each atomically; returns their paths."""
    fmt = TableFormat(fmt)
    paths = []
    for name, build in zip(table_names(fmt), (step_table, epoch_table)):
        path = Path(folder) / name
        with atomic_path(path) as tmp, open(tmp, "wb") as stream:  # a stream: pyarrow takes only UTF-8 paths
            WRITERS[fmt](build(records, names), stream)
        paths.append(path)
    return paths


def read_table(path: Path) -> dict[str, np.ndarray]:
    """A table written by `write_tables`, as name -> numpy column (nulls as NaN); for tests and scripts."""
    import pyarrow.csv as pc
    import pyarrow.parquet as pq

    path = Path(path)
    table = pq.read_table(path) if path.suffix == ".parquet" else pc.read_csv(path)
    return {name: column.to_numpy(zero_copy_only=False) for name, column in zip(table.column_names, table.columns)}
