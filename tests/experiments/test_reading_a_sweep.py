"""docs/runs.md, "Reading a sweep": its two blocks, run as written, load a sweep's tables as DataFrames.

The bash block's `lab sweep` runs in a fresh folder; the python block is executed there, as a student
pastes it, and what it builds is checked against the sweep's own sizes and against pyarrow's reading.
"""

import contextlib
import io
import re
import shlex
from pathlib import Path

import pyarrow.parquet as pq
from typer.testing import CliRunner

from lab.cli import app

DOC = Path(__file__).resolve().parents[2] / "docs" / "runs.md"


def section_blocks(text: str, heading: str) -> dict[str, str]:
    """The fenced blocks of one level-2 section, by language."""
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^```(\w+)\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL))


def test_the_documented_snippet_loads_a_sweeps_tables_as_dataframes(tmp_path, monkeypatch):
    blocks = section_blocks(DOC.read_text(), "Reading a sweep")
    args = shlex.split(blocks["bash"].strip())
    assert args[0] == "lab", args
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, [*args[1:], "--quiet"])
    assert result.exit_code == 0, result.output
    namespace, printed = {}, io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(blocks["python"], namespace)
    steps, epochs, curves = namespace["steps"], namespace["epochs"], namespace["curves"]
    assert len(steps) == 40 * 100 * 10 and len(epochs) == 40 * 100  # 2 deltas x 20 seeds, 100 epochs x 10 steps
    assert sorted(curves.columns) == ["centered", "raw"] and len(curves) == 100
    table = pq.read_table(tmp_path / "runs" / "deltas" / "metrics_epoch.parquet").to_pylist()
    last = [row["mean_reward"] for row in table if row["epoch"] == 99 and row["config_delta"] == "raw"]
    assert abs(curves["raw"].iloc[-1] - sum(last) / len(last)) < 1e-9
    assert "centered" in printed.getvalue() and "raw" in printed.getvalue()
