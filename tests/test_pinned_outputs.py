"""What a user sees is pinned: runs' and sweeps' metric files, for both policies.

    tests/data/pinned/<case>/metrics.csv, samples.txt     of `lab run`
    tests/data/pinned/sweep-<case>/metrics_step.csv, ...  of `lab sweep --format csv`

A refactor of the training loop, the policies or the writers must leave every one of these files as
it was. The pinned runs train in float64 (`--dtype float64`), so the files hold on every CPU: in
float32, torch's kernel sets (AVX-512, AVX2, the unvectorised `default`) round differently in the
last bits, a sampled token can flip after a few epochs and a run drifts by 1e-3 and more; in float64
the kernels differ by about 1e-16 relative, which a few epochs grow to about 1e-13 (no draw flips:
samples.txt is byte for byte, and every file here was byte-identical under `ATEN_CPU_CAPABILITY=avx512`,
`avx2` and `default` when pinned). metrics.csv stores each value as the shortest text of its float32
rounding, so a float64 difference of 1e-13 can at most move a cell across one float32 rounding
boundary: one step of float32, 6e-8 relative. A CSV that is not byte-identical therefore passes when it
has the same header and rows, the same text in every non-numeric cell, and every number within
`RTOL` = 2.5e-7 relative (four float32 steps; `ATOL` for cells near zero) of the pinned one; a changed
formula moves numbers far more (the last test shows the check failing on a 1e-6 move). The runs are short (a few epochs) but cover every delta mode, every
loss mode, the KL penalty with a periodic and a frozen reference, the entropy bonus, the init
scale, both samplers, every loss aggregation of the autoregressive policy, and DPO online and offline. A hash changes when
any number changes in any digit; when a change of the numbers is intended, the test says which
file moved, and the new hashes are recorded here on purpose.
"""

from __future__ import annotations

import csv
import math
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app

pytestmark = pytest.mark.crosspath  # .ci/run runs these under other CPU kernel sets too

SHORT = ["--epochs", "4", "--steps", "3", "--quiet", "--device", "cpu", "--dtype", "float64"]

RUNS = {
    "raw-naive": [],
    "centered-clipped": ["--delta", "centered", "--loss", "clipped"],
    "normalized-unclipped-kl": ["--delta", "normalized", "--loss", "unclipped", "--kl", "0.05", "--kl-period", "2"],
    "loo-clipped-frozen-kl": ["--delta", "loo", "--loss", "clipped", "--kl", "0.1", "--kl-period", "0"],
    "max-naive-entropy": ["--delta", "max", "--entropy-coef", "0.03", "--init-scale", "0.5"],
    "multinomial-distance": ["--sampler", "multinomial", "--reward", "distance", "--seed", "3"],
    "ar-raw-naive": ["--policy", "autoregressive"],
    "ar-centered-clipped-smtm": ["--policy", "autoregressive", "--delta", "centered", "--loss", "clipped",
                                 "--loss-agg", "seq-mean-token-mean"],
    "ar-normalized-kl-smts": ["--policy", "autoregressive", "--delta", "normalized", "--loss", "unclipped",
                              "--kl", "0.05", "--kl-period", "2", "--loss-agg", "seq-mean-token-sum"],
    "ar-loo-frozen-kl-norm": ["--policy", "autoregressive", "--delta", "loo", "--kl", "0.1", "--kl-period", "0",
                              "--loss-agg", "seq-mean-token-sum-norm", "--init-scale", "0.1", "--max-length", "6"],
    "dpo-online": ["--loss", "dpo", "--kl", "0.1"],
    "dpo-offline-ipo-bt": ["--loss", "dpo", "--kl", "0.2", "--pairs", "offline", "--pairs-per-prompt", "3",
                           "--dpo-loss", "ipo", "--preference", "bradley-terry"],
    "ar-dpo-online": ["--policy", "autoregressive", "--loss", "dpo", "--kl", "0.1", "--seed", "2"],
}

SWEEPS = {
    "factorized": ["--delta", "raw", "--delta", "centered", "--loss", "clipped", "--kl", "0", "--kl", "0.05",
                   "--seeds", "2"],
    "autoregressive": ["--policy", "autoregressive", "--delta", "centered", "--delta", "normalized",
                       "--loss-agg", "token-mean", "--loss-agg", "seq-mean-token-mean", "--seeds", "2"],
}

PINNED = Path(__file__).resolve().parent / "data" / "pinned"
RTOL, ATOL = 2.5e-7, 1e-30
REPIN = os.environ.get("LAB_REPIN") == "1"
"""`LAB_REPIN=1 pytest tests/test_pinned_outputs.py` writes the files anew (only when a change of the numbers
is intended: the diff of tests/data/pinned then shows which numbers moved)."""


def _cells_match(got: str, pinned: str) -> bool:
    if got == pinned:
        return True
    try:
        a, b = float(got), float(pinned)
    except ValueError:
        return False
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL)


def difference(got: Path, pinned: Path) -> str | None:
    """None when `got` matches the pinned file (module docstring), else what differs first."""
    if got.read_bytes() == pinned.read_bytes():
        return None
    if got.suffix != ".csv":
        return f"{got.name} differs from {pinned} (text files are pinned byte for byte)"
    rows, pinned_rows = list(csv.reader(got.open())), list(csv.reader(pinned.open()))
    if len(rows) != len(pinned_rows) or rows[:1] != pinned_rows[:1]:
        return f"{got.name}: its header or number of rows differs from {pinned}"
    for line, (row, pinned_row) in enumerate(zip(rows, pinned_rows), start=1):
        for column, got_cell, pinned_cell in zip(rows[0], row, pinned_row):
            if len(row) != len(pinned_row) or not _cells_match(got_cell, pinned_cell):
                return f"{got.name} line {line}, {column}: {got_cell!r}, pinned {pinned_cell!r}"
    return None


def check_pinned(out: Path, case: str, files: tuple[str, ...]) -> None:
    folder = PINNED / case
    if REPIN:
        folder.mkdir(parents=True, exist_ok=True)
        for name in files:
            shutil.copyfile(out / name, folder / name)
    problems = [p for p in (difference(out / name, folder / name) for name in files) if p]
    assert not problems, problems


@pytest.mark.parametrize("name", sorted(RUNS))
def test_run_files_are_the_pinned_ones(name, tmp_path):
    """A run's metrics.csv and samples.txt are the ones pinned before the last refactor."""
    out = tmp_path / name
    result = CliRunner().invoke(app, ["run", *RUNS[name], *SHORT, "--out", str(out)])
    assert result.exit_code == 0, result.output
    check_pinned(out, name, ("metrics.csv", "samples.txt"))


@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_sweep_tables_are_the_pinned_ones(name, tmp_path):
    """A sweep's step and epoch tables (CSV) are the ones pinned before the last refactor."""
    out = tmp_path / name
    result = CliRunner().invoke(app, ["sweep", *SWEEPS[name], *SHORT, "--format", "csv", "--out", str(out)])
    assert result.exit_code == 0, result.output
    check_pinned(out, "sweep-" + name, ("metrics_step.csv", "metrics_epoch.csv"))


def test_the_comparison_sees_a_moved_number_and_forgives_the_last_digits(tmp_path):
    """A metric one float32 step off (0.5 against 0.50000006) passes; one 1e-6 off fails, as does a changed text
    cell."""
    pinned, got = tmp_path / "pinned.csv", tmp_path / "got.csv"
    pinned.write_text("epoch,loss,note\n0,0.5,a\n1,0.25,\n")
    got.write_text("epoch,loss,note\n0,0.50000006,a\n1,0.25,\n")
    assert difference(got, pinned) is None
    got.write_text("epoch,loss,note\n0,0.5000005,a\n1,0.25,\n")
    assert "line 2, loss" in difference(got, pinned)
    got.write_text("epoch,loss,note\n0,0.5,b\n1,0.25,\n")
    assert difference(got, pinned) is not None
