"""A diverging run fails loudly and poisons nothing (`lab.training.divergence`).

`lab run --lr 10 --steps 50 --kl 0.05` used to end with a NaN policy, blank metric cells, a normal
summary line and exit 0; a sweep of it reported a mean over NaN runs; with `--kl 0` the `loss`
column was NaN wherever k3 overflowed (0 x inf).
"""

import csv
import io
import json
import os

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.training.config import TrainConfig
from lab.training.divergence import DIVERGED_EXIT_CODE
from lab.experiments.sweep import summarise, summary_csv, summary_table
from lab.training.train import train
from tasks.sorting import make_task

DIVERGING = TrainConfig(lr=10, steps=50, kl=0.05, epochs=4)
"""The issue's reproduction (fewer epochs: it diverges on its second step)."""
HEALTHY = TrainConfig(steps=50, kl=0.05, epochs=4)


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def task():
    return make_task()


def test_a_diverging_run_stops_where_its_loss_stops_being_finite(task):
    records = train(task, DIVERGING)
    found = records.divergence[0]
    assert found is not None and found.what in ("loss is inf", "loss is nan")
    assert found.step == found.epoch * DIVERGING.steps + found.inner_step
    loss = records.step_metrics["loss"][0]
    assert loss.shape == (found.step + 1,)  # the records end at the diverged step
    assert np.isfinite(loss[:found.step]).all() and not np.isfinite(loss[found.step])
    assert records.epoch_metrics["mean_reward"].shape == (1, found.epoch + 1)
    assert np.isnan(records.epoch_metrics["greedy_reward"][0, found.epoch])  # evaluated after the divergence
    for value in records.state.values():  # frozen at the last parameters known finite
        assert torch.isfinite(value).all()


def test_a_diverged_runs_distance_to_the_optimum_is_emptied_from_its_divergence_epoch(task):
    """The exact distance to pi* is measured after an epoch's steps, like the greedy evaluation: at the epoch
    where a run diverged it would measure a policy past its last finite step, so it is NaN from there on."""
    records = train(task, [DIVERGING.replace(optimum_metrics=True), HEALTHY.replace(optimum_metrics=True)])
    found = records.divergence[0]
    assert found is not None and records.divergence[1] is None
    for name in ("kl_to_optimum", "objective_exact", "objective_gap"):
        values = records.epoch_metrics[name]
        assert np.isnan(values[0, found.epoch:]).all(), name  # the reverted policy's value would be finite
        assert np.isfinite(values[1]).all(), name


def test_a_diverged_run_in_a_batch_is_frozen_and_changes_no_other_run(task):
    """Runs never couple: the healthy runs of a batch are exactly what they are without the diverging one."""
    batch = train(task, [DIVERGING, HEALTHY, HEALTHY.replace(kl=0.0, seed=1)])
    alone = train(task, [HEALTHY, HEALTHY.replace(kl=0.0, seed=1)])
    assert batch.divergence[0] is not None and batch.divergence[1:] == [None, None]
    for name, values in alone.step_metrics.items():
        np.testing.assert_allclose(batch.step_metrics[name][1:], values, rtol=1e-4, atol=1e-5, err_msg=name)
    np.testing.assert_array_equal(batch.epoch_metrics["mean_reward"][1:], alone.epoch_metrics["mean_reward"])
    step = batch.divergence[0].step
    assert np.isnan(batch.step_metrics["loss"][0, step + 1:]).all()  # nothing after the divergence pretends
    assert np.isnan(batch.final("mean_reward")[0])
    assert batch.diverged().tolist() == [True, False, False]


def test_beta_zero_leaves_the_kl_out_even_when_k3_overflows(task):
    """`--kl 0` with k3 overflowing: the loss is the surrogate, never 0 x inf = NaN, in a batch with beta > 0 too."""
    config = TrainConfig(lr=10, steps=50, kl=0.0, epochs=2)
    for records in (train(task, config), train(task, [config, config.replace(kl=0.05, seed=1)])):
        kl, loss, pg = (records.step_metrics[n][0] for n in ("kl", "loss", "pg_loss"))
        assert np.isinf(kl).any()  # the mutant case: k3 does overflow here
        assert not np.isnan(loss).any() and np.array_equal(loss, pg)
        assert records.divergence[0] is None


def test_summaries_count_diverged_runs_and_leave_them_out_of_the_means(task):
    configs = [DIVERGING.replace(seed=s) for s in range(2)] + [HEALTHY.replace(seed=s) for s in range(3)]
    records = train(task, configs)
    (bad, good) = summarise(records, ["lr"])
    assert (bad.seeds, bad.diverged, bad.final_mean_reward.n) == (2, 2, 0)
    assert (good.seeds, good.diverged, good.final_mean_reward.n) == (3, 0, 3)
    assert good.final_mean_reward.estimate == pytest.approx(records.final("mean_reward")[2:].mean())
    rows = list(csv.DictReader(io.StringIO(summary_csv([bad, good], ["lr"]))))
    assert [r["diverged"] for r in rows] == ["2", "0"] and rows[0]["final_mean_reward"] == ""
    table = summary_table([bad, good], ["lr"])
    assert "diverged" in table.splitlines()[0] and "left out" in table


def test_lab_run_reports_divergence_in_one_line_exit_3_and_keeps_the_records(tmp_path):
    result = CliRunner().invoke(app, ["run", "--lr", "10", "--steps", "50", "--kl", "0.05", "--epochs", "3",
                                      "--out", "d"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == DIVERGED_EXIT_CODE == 3 and len(lines) == 1, result.output
    assert "diverged at epoch 0, step" in lines[0] and "--lr" in lines[0] and "Traceback" not in result.output
    assert "final mean reward" not in result.output  # no summary line pretends it finished
    summary = json.loads((tmp_path / "d" / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["final_mean_reward"] is None
    assert set(summary["diverged"]) == {"epoch", "step", "inner_step", "what"}
    rows = list(csv.DictReader(io.StringIO((tmp_path / "d" / "metrics.csv").read_text())))
    assert len(rows) == summary["diverged"]["step"] + 1 and rows[-1]["loss"] in ("inf", "")
    assert not (tmp_path / "d" / "policy.pt").exists()  # no final policy


def test_a_healthy_run_says_ok(tmp_path):
    result = CliRunner().invoke(app, ["run", "--epochs", "2", "--steps", "2", "--out", "ok", "--quiet"])
    assert result.exit_code == 0
    assert json.loads((tmp_path / "ok" / "summary.json").read_text())["status"] == "ok"


def test_lab_sweep_warns_and_exits_3_only_when_every_run_diverged(tmp_path):
    base = ["sweep", "--steps", "50", "--kl", "0.05", "--epochs", "2", "--seeds", "2", "--quiet"]
    some = CliRunner().invoke(app, [*base, "--lr", "10", "--lr", "0.001", "--out", "some"])
    assert some.exit_code == 0 and "Warning: 2 of 4 runs diverged" in some.output, some.output
    rows = list(csv.DictReader(io.StringIO((tmp_path / "some" / "summary.csv").read_text())))
    assert [(r["lr"], r["diverged"]) for r in rows] == [("10.0", "2"), ("0.001", "0")]
    every = CliRunner().invoke(app, [*base, "--lr", "10", "--out", "every"])
    assert every.exit_code == 3 and "all 2 runs diverged" in every.output
    assert sorted(os.listdir(tmp_path)) == ["every", "some"]


def test_a_non_finite_parameter_with_finite_losses_is_caught_at_the_epochs_end():
    """The last step's update can break the parameters after its loss was measured: the logits show it."""
    from lab.training.divergence import DivergenceGuard

    parameters = [torch.zeros(2, 3), torch.zeros(2, 4)]
    guard = DivergenceGuard(runs=2, steps=3, names=["embedding", "decode"])
    guard.start_epoch(parameters)
    parameters[1][1, 2] = float("nan")  # run 1's update went wrong
    logits = torch.zeros(2, 3, 5)
    logits[1, 0, 0] = float("nan")
    assert guard.check(4, [torch.zeros(2)] * 3, logits, parameters)
    assert guard.found[0] is None
    assert guard.found[1].what == "parameters decode are not finite after the step"
    assert (guard.found[1].epoch, guard.found[1].step, guard.found[1].inner_step) == (4, 14, 2)
    assert torch.equal(parameters[1][1], torch.zeros(4))  # back to the epoch's start, and kept there
    parameters[1][1] += 1
    guard.after_step(parameters)
    assert torch.equal(parameters[1][1], torch.zeros(4))
    assert not guard.check(5, [torch.zeros(2)] * 3, torch.zeros(2, 3, 5), parameters)  # nothing new


def test_the_autoregressive_loop_stops_a_diverging_run_too(task):
    records = train(task, DIVERGING.replace(policy="autoregressive"))
    found = records.divergence[0]
    assert found is not None and records.step_metrics["loss"].shape == (1, found.step + 1)
    healthy = train(task, HEALTHY.replace(policy="autoregressive", epochs=2))
    assert healthy.divergence == [None]
