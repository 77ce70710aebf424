"""`--init-from RUN_FOLDER` (and `--demos-from`): a run that starts from another's policy.

    start = RUN/policy.pt, the same for every seed;  reference (KL, DPO) = start;  config.json: folder, sha256
A folder without the lab's mark, a diverged run, or a policy whose shape does not fit the settings is refused
before anything is written, one line per mismatch.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.files.tables import read_table

SHORT = ["--epochs", "2", "--steps", "2", "--quiet", "--device", "cpu"]


@pytest.fixture(scope="module")
def starts(tmp_path_factory):
    """An SFT run of each policy, to start from."""
    folder = tmp_path_factory.mktemp("starts")
    for policy in ("factorized", "autoregressive"):
        result = CliRunner().invoke(app, ["run", "--loss", "sft", "--epochs", "8", "--lr", "0.01", "--quiet",
                                          "--device", "cpu", "--policy", policy, "--out", str(folder / policy)])
        assert result.exit_code == 0, result.output
    return folder


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_a_run_starts_from_the_folders_policy_which_is_its_reference(tmp_path, starts, policy):
    start = starts / policy
    out = tmp_path / "grpo"
    result = CliRunner().invoke(app, ["run", *SHORT, "--policy", policy, "--init-from", str(start), "--kl", "0.1",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["init_from"] == str(start)
    assert config["init_sha256"] == hashlib.sha256((start / "policy.pt").read_bytes()).hexdigest()
    start_summary = json.loads((start / "summary.json").read_text())
    rows = (out / "metrics.csv").read_text().splitlines()
    header, first = rows[0].split(","), dict(zip(rows[0].split(","), rows[1].split(",")))
    assert float(first["kl_exact"]) == 0.0  # the reference is the start itself
    assert "kl_exact" in header and start_summary["final_greedy_accuracy"] == 1.0
    assert float(first["mean_reward"]) > 4  # the SFT policy's samples, not a random policy's


@pytest.mark.crosspath
def test_in_a_sweep_every_seed_starts_from_the_same_policy_and_samples_its_own(tmp_path):
    """In float64 (the runs of a batch sit in different lanes of its kernels, which in float32 round differently on
    some CPUs), every seed's first entropy is the start's, to the float32 rounding of the stored metric."""
    start, out = tmp_path / "start", tmp_path / "sweep"
    assert CliRunner().invoke(app, ["run", *SHORT, "--out", str(start)]).exit_code == 0  # still exploring
    result = CliRunner().invoke(app, ["sweep", *SHORT, "--init-from", str(start), "--seeds", "3", "--dtype", "float64",
                                      "--loss", "dpo", "--kl", "0.1", "--format", "csv", "--out", str(out)])
    assert result.exit_code == 0, result.output
    steps = read_table(out / "metrics_step.csv")
    first = steps["step"] == 0
    np.testing.assert_array_equal(steps["kl_exact"][first], 0.0)  # DPO's reference: the start, for every seed
    np.testing.assert_allclose(steps["entropy"][first], steps["entropy"][first][0], rtol=2.5e-7, atol=0)  # one start
    epochs = read_table(out / "metrics_epoch.csv")
    assert len(set(epochs["mean_reward"][epochs["epoch"] == 0].tolist())) > 1  # each seed samples its own
    assert json.loads((out / "config.json").read_text())["base"]["init_from"] == str(start)


def test_sft_demonstrations_drawn_from_a_runs_policy(tmp_path, starts):
    out = tmp_path / "imitate"
    result = CliRunner().invoke(app, ["run", *SHORT, "--loss", "sft", "--demos", "policy", "--demos-from",
                                      str(starts / "factorized"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "config.json").read_text())["config"]["demos_from"] == str(starts / "factorized")


def test_diagnose_reads_a_run_that_started_from_another(tmp_path, starts):
    out = tmp_path / "grpo"
    assert CliRunner().invoke(app, ["run", *SHORT, "--init-from", str(starts / "factorized"), "--out",
                                    str(out)]).exit_code == 0
    result = CliRunner().invoke(app, ["diagnose", "--from-run", str(out), "--group-size", "2", "--out",
                                      str(tmp_path / "diagnose.png")])  # not into the working folder's runs/
    assert result.exit_code == 0, result.output


def test_each_mismatch_is_one_line_and_nothing_is_written(tmp_path, starts, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", *SHORT, "--init-from", str(starts / "factorized"), "--dim", "12",
                                      "--vocab-size", "6"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 2 and lines[0].startswith("Error: ")
    assert "(--vocab-size)" in lines[0] and "(--dim)" in lines[1]
    result = CliRunner().invoke(app, ["sweep", *SHORT, "--seeds", "1", "--init-from", str(starts / "factorized"),
                                      "--policy", "autoregressive"])
    assert result.exit_code == 2 and "its policy is factorized" in result.output
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("damage, fragment", [
    ("no folder", "no such run folder"),
    ("no mark", "no .lab-output mark"),
    ("other policy", "not the file lab run wrote"),
    ("diverged", 'does not say "status": "ok"'),
    ("a sweep", "written by lab sweep, not lab run"),
])
def test_a_folder_that_is_not_a_finished_lab_run_is_refused(tmp_path, starts, monkeypatch, damage, fragment):
    import shutil

    folder = tmp_path / "copy"
    if damage != "no folder":
        shutil.copytree(starts / "factorized", folder)
    if damage == "no mark":
        (folder / ".lab-output").unlink()
    if damage == "other policy":
        shutil.copy(starts / "autoregressive" / "policy.pt", folder / "policy.pt")
    if damage == "a sweep":
        shutil.rmtree(folder)
        assert CliRunner().invoke(app, ["sweep", *SHORT, "--seeds", "1", "--out", str(folder)]).exit_code == 0
    if damage == "diverged":
        shutil.rmtree(folder)
        result = CliRunner().invoke(app, ["run", *SHORT, "--init-scale", "1e30", "--out", str(folder)])
        assert result.exit_code == 3
    monkeypatch.chdir(tmp_path)
    for command in (["run"], ["sweep", "--seeds", "1"]):
        result = CliRunner().invoke(app, [*command, *SHORT, "--init-from", str(folder)])
        assert result.exit_code == 2 and fragment in result.output and "Traceback" not in result.output
    assert sorted(os.listdir(tmp_path)) == ([] if damage == "no folder" else ["copy"])


def test_the_default_folder_name_shows_the_start_folders_name_and_a_hash_of_where_it_is(tmp_path, starts, monkeypatch):
    """Its own name, then 8 hex digits of the sha256 of its resolved path (issue 34: `a/run` and `b/run` apart)."""
    monkeypatch.chdir(tmp_path)
    for command in (["run"], ["sweep", "--seeds", "1"]):
        result = CliRunner().invoke(app, [*command, *SHORT, "--init-from", str(starts / "factorized")])
        assert result.exit_code == 0, result.output
    names = sorted(os.listdir(tmp_path / "runs"))
    label = "factorized-" + hashlib.sha256(os.fsencode(os.path.realpath(starts / "factorized"))).hexdigest()[:8]
    assert names == [f"raw-naive-inclusion-ordering-epochs2-steps2-init-from{label}-seed5",
                     f"sweep-raw-naive-inclusion-ordering-epochs2-steps2-init-from{label}-1seeds"]
