"""A run's records as the text files `lab run` writes: metrics.csv and samples.txt.

    metrics.csv   one row per optimizer step: epoch, step, inner_step, the epoch metrics, the step metrics
    samples.txt   every kept epoch: each prompt, then each sampled response with its reward and delta
                  (a DPO run: its reward and, for the group's pair, `chosen` or `rejected`)

Every value's text is `format_value`'s: integers as such, floats as the shortest text that reads back
to the same float32 (the precision the metrics are computed in), NaN as empty.
"""

from __future__ import annotations

import csv
import io

import numpy as np

from lab.training.records import (EPOCH_METRICS, STEP_METRICS, Records, epoch_metric_names, metric_columns,
                                  step_metric_names)


def format_value(value) -> str:
    """A stable text form: integers as such, floats as the shortest text that reads back
    to the same float32 (the precision the metrics are computed in), NaN as empty."""
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = np.float32(value)
    return "" if np.isnan(value) else str(value)


def _column_text(values: np.ndarray) -> list[str]:
    """`format_value` over a whole column (the same text, without a Python call per value)."""
    if values.dtype.kind in "iub":
        return [str(v) for v in values.tolist()]
    values = values.astype(np.float32, copy=False)
    text = [str(v) for v in values]  # np.float32 scalars print their shortest round-trip text
    for i in np.flatnonzero(np.isnan(values)):
        text[i] = ""
    return text


def metrics_csv(records: Records, extra_columns: dict[str, list] | None = None) -> str:
    """All runs' rows as CSV text; `extra_columns` name -> one value per run (seed, delta, ...).

    Built column by column (a 500-run sweep has half a million rows); the text of every value is
    `format_value`'s.
    """
    extra_columns = extra_columns or {}
    epoch_names, step_names = epoch_metric_names(records), step_metric_names(records)
    header = io.StringIO()
    csv.writer(header, lineterminator="\n").writerow([*extra_columns, *metric_columns(records)])
    lines = [header.getvalue()]
    total = next(iter(records.step_metrics.values())).shape[1]
    for run in range(records.num_runs):
        prefix = "".join(f"{v if isinstance(v, str) else format_value(v)},"
                         for v in (values[run] for values in extra_columns.values()))
        epoch, inner = np.divmod(np.arange(total), records.configs[run].steps)
        per_epoch = [_column_text(records.epoch_metrics[m][run]) for m in epoch_names]
        per_step = [_column_text(records.step_metrics[m][run]) for m in step_names]
        # the order of metric_columns: every run's epoch then step metrics, then the extra epoch and step ones
        columns = [_column_text(epoch), _column_text(np.arange(total)), _column_text(inner),
                   *([text[e] for e in epoch.tolist()] for text in per_epoch[:len(EPOCH_METRICS)]),
                   *per_step[:len(STEP_METRICS)],
                   *([text[e] for e in epoch.tolist()] for text in per_epoch[len(EPOCH_METRICS):]),
                   *per_step[len(STEP_METRICS):]]
        lines.extend(prefix + ",".join(row) + "\n" for row in zip(*columns))
    return "".join(lines)


def response_text(response: list[int], eos: int | None) -> str:
    """`[0, 1, 2]`; a variable-length response up to its EOS, shown as `<eos>`: `[0, 1, 2, <eos>]`."""
    if eos is None:
        return str(response)
    end = response.index(eos) + 1 if eos in response else len(response)  # padding after EOS is not shown
    return "[" + ", ".join("<eos>" if token == eos else str(token) for token in response[:end]) + "]"


def samples_text(records: Records, run: int = 0) -> str:
    """The lecture's sample log, one block per kept epoch: prompt, then response reward delta; a DPO run uses
    no deltas, so its responses show their role instead: `chosen` and `rejected` for the group's pair."""
    lines = []
    for snap in records.samples:
        lines.append(f"== epoch {snap.epoch} ==")
        for b, prompt in enumerate(records.prompts.tolist()):
            lines.append(f"prompt {prompt}  (optimum {format_value(records.optimum[run, b])})")
            roles = {} if snap.pairs is None else {int(t): role for t, role in zip(snap.pairs[run, b], ROLES) if t >= 0}
            for t, response in enumerate(snap.responses[run, b].tolist()):
                tail = (f"  delta {snap.deltas[run, b, t]:+.4f}" if snap.pairs is None else
                        f"  {roles[t]}" if t in roles else "")
                lines.append(f"  response {response_text(response, records.eos)}  "
                             f"reward {format_value(snap.rewards[run, b, t])}{tail}")
        lines.append("")
    return "\n".join(lines)


ROLES = ("chosen", "rejected")
"""A DPO pair's two responses, in Samples.pairs' order."""
