"""What a user sees is pinned: the bytes of runs' and sweeps' metric files, for both policies.

    sha256(metrics.csv), sha256(samples.txt) of `lab run`; sha256 of `lab sweep --format csv`'s tables

A refactor of the training loop, the policies or the writers must leave every one of these files
byte-identical on the CPU. The runs are short (a few epochs) but cover every delta mode, every
loss mode, the KL penalty with a periodic and a frozen reference, the entropy bonus, the init
scale, both samplers, every loss aggregation of the autoregressive policy, and DPO online and offline. A hash changes when
any number changes in any digit; when a change of the numbers is intended, the test says which
file moved, and the new hashes are recorded here on purpose.
"""

from __future__ import annotations

import hashlib

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app

SHORT = ["--epochs", "4", "--steps", "3", "--quiet", "--device", "cpu"]

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

PINNED = {'ar-dpo-online': {'metrics.csv': '0bcbee4f3473dc6b', 'samples.txt': 'e11044b242d35de6'},
 'dpo-offline-ipo-bt': {'metrics.csv': '49d59869fafe18e6', 'samples.txt': '632b57bed3a52b0c'},
 'dpo-online': {'metrics.csv': '60c644794493c854', 'samples.txt': '6521d603a4344a4a'},
 'ar-centered-clipped-smtm': {'metrics.csv': '3ad62d5683e03168', 'samples.txt': '1a48aea8195f628d'},
 'ar-loo-frozen-kl-norm': {'metrics.csv': '94c3c06ca7d25b1c', 'samples.txt': '9fd8b3b53d196c33'},
 'ar-normalized-kl-smts': {'metrics.csv': '95dda001cea20f83', 'samples.txt': '591d71dce4ce428b'},
 'ar-raw-naive': {'metrics.csv': 'c0507b105624d1bc', 'samples.txt': '4a565fc7225dcfde'},
 'centered-clipped': {'metrics.csv': 'a8eef2bbcc94b3ab', 'samples.txt': '4ff0a0b7bc311dcd'},
 'loo-clipped-frozen-kl': {'metrics.csv': '0fd8a97318d5766f', 'samples.txt': '4aa42ce85cb677aa'},
 'max-naive-entropy': {'metrics.csv': '0d6a64c2563a0b83', 'samples.txt': '7e693d7bb421ab17'},
 'multinomial-distance': {'metrics.csv': '541bdffc73db4dd0', 'samples.txt': '638e21e4e3ff2c5e'},
 'normalized-unclipped-kl': {'metrics.csv': '83df2b7478af80f4', 'samples.txt': 'f8a50536a9dcacd4'},
 'raw-naive': {'metrics.csv': '3858c8154f43e673', 'samples.txt': '3a48b46e3a58453c'},
 'sweep-autoregressive': {'metrics_epoch.csv': '7e32a2662e76b76d', 'metrics_step.csv': '6a308b40f610aee6'},
 'sweep-factorized': {'metrics_epoch.csv': '943a500e8080d0d8', 'metrics_step.csv': '82dece89293b2fc3'}}


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_run_files_are_byte_identical_to_the_pinned_ones(name, tmp_path):
    """A run's metrics.csv and samples.txt have the bytes recorded before the last refactor."""
    out = tmp_path / name
    result = CliRunner().invoke(app, ["run", *RUNS[name], *SHORT, "--out", str(out)])
    assert result.exit_code == 0, result.output
    got = {f: _sha(out / f) for f in ("metrics.csv", "samples.txt")}
    assert got == PINNED[name]


@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_sweep_tables_are_byte_identical_to_the_pinned_ones(name, tmp_path):
    """A sweep's step and epoch tables (CSV) have the bytes recorded before the last refactor."""
    out = tmp_path / name
    result = CliRunner().invoke(app, ["sweep", *SWEEPS[name], *SHORT, "--format", "csv", "--out", str(out)])
    assert result.exit_code == 0, result.output
    got = {f: _sha(out / f) for f in ("metrics_step.csv", "metrics_epoch.csv")}
    assert got == PINNED["sweep-" + name]
