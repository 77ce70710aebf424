"""DPO in the training loop (`--loss dpo`): its pairs, its loss at the first step, its metrics, the CLI.

At an epoch's first step of the first epoch the policy is its own reference, so every kept pair has
h = 0: the sigmoid loss is exactly log 2 and the IPO loss (1/(2 beta))^2, and every implicit reward is 0.
"""

import csv
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.training.config import ConfigError, TrainConfig, check_batchable
from lab.training.records import DPO_STEP_METRICS, OPTIMUM_METRICS
from lab.training.train import train
from tasks.sorting import make_task

TASK = make_task()
SHORT = dict(epochs=4, steps=3)


def dpo(**changes) -> TrainConfig:
    return TrainConfig(loss="dpo", **{"kl": 0.1, **SHORT, **changes})


@pytest.mark.parametrize("changes", [{}, {"pairs": "offline", "pairs_per_prompt": 8}, {"preference": "bradley-terry"},
                                     {"dpo_loss": "ipo"}, {"policy": "autoregressive"}])
def test_a_dpo_run_records_trls_metrics_and_starts_at_h_zero(changes):
    records = train(TASK, dpo(**changes))
    steps = records.step_metrics
    assert set(DPO_STEP_METRICS) <= set(steps) and set(OPTIMUM_METRICS) <= set(records.epoch_metrics)
    first_kept = steps["pair_fraction"][0, 0] > 0
    if first_kept:
        expected = 25.0 if changes.get("dpo_loss") == "ipo" else math.log(2.0)  # (1/(2 * 0.1))^2 or log 2
        assert steps["loss"][0, 0] == pytest.approx(expected, rel=1e-6)
        assert steps["chosen_rewards"][0, 0] == 0.0 and steps["rejected_rewards"][0, 0] == 0.0
    kept = steps["pair_fraction"][0] > 0
    assert np.all((steps["reward_accuracy"][0][kept] >= 0) & (steps["reward_accuracy"][0][kept] <= 1))
    margin = steps["chosen_rewards"][0] - steps["rejected_rewards"][0]
    np.testing.assert_allclose(steps["reward_margin"][0][kept], margin[kept], rtol=1e-4, atol=1e-6)
    gap, kl = records.epoch_metrics["objective_gap"][0], records.epoch_metrics["kl_to_optimum"][0]
    np.testing.assert_allclose(gap, 0.1 * kl, rtol=1e-3, atol=1e-6)  # claim 26, on the trained policies


def test_offline_pairs_are_one_fixed_set():
    steps = train(TASK, dpo(pairs="offline", pairs_per_prompt=8, reward="inclusion-ordering")).step_metrics
    assert len(set(steps["pair_fraction"][0].tolist())) == 1  # the same pairs at every step of every epoch


def test_a_run_is_the_same_alone_and_in_a_batch():
    alone = train(TASK, dpo(seed=3, preference="bradley-terry"))
    together = train(TASK, [dpo(seed=1), dpo(seed=3, preference="bradley-terry", dpo_loss="ipo"),
                            dpo(seed=3, preference="bradley-terry")])
    for name in ("loss", "chosen_logps", "kl_exact"):
        np.testing.assert_array_equal(alone.step_metrics[name][0], together.step_metrics[name][2])


def test_dpo_and_the_other_losses_train_in_separate_batches():
    with pytest.raises(ConfigError, match="must share pairs"):
        check_batchable([dpo(), TrainConfig(**SHORT)])


def test_online_dpo_with_a_small_beta_ends_closer_to_pi_star():
    """The lecture's setting (seed 5, inclusion-ordering reward), beta = 0.05, 100 epochs: KL(pi_theta || pi*)
    after the last epoch is below its value after the first, for each of two seeds."""
    records = train(TASK, [dpo(kl=0.05, epochs=100, steps=10, seed=s) for s in (0, 2)])
    kl = records.epoch_metrics["kl_to_optimum"]
    assert np.all(kl[:, -1] < 0.75 * kl[:, 0])


@pytest.mark.parametrize("args, words", [
    (["--loss", "dpo", "--kl", "0"], "--kl > 0"),
    (["--loss", "dpo", "--kl", "0.1", "--pairs", "sideways"], "online"),
    (["--loss", "dpo", "--kl", "0.1", "--preference", "best"], "bradley-terry"),
    (["--loss", "dpo", "--kl", "0.1", "--dpo-loss", "hinge"], "ipo"),
    (["--pairs", "offline"], "--loss dpo only"),
    (["--loss", "dpo", "--kl", "0.1", "--pairs-per-prompt", "4"], "--pairs offline only"),
    (["--loss", "dpo", "--kl", "0.1", "--delta", "gae"], "--delta gae"),
    (["--loss", "dpo", "--kl", "0.1", "--gae-lambda", "0.5"], "--loss dpo does not use"),
])
def test_bad_dpo_options_exit_2_with_one_line(tmp_path, args, words):
    result = CliRunner().invoke(app, ["run", *args, "--quiet", "--device", "cpu", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert words in result.output
    assert not (tmp_path / "o").exists()


def test_lab_run_writes_the_dpo_columns_and_lab_sweep_runs_both_pair_sources(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["run", "--loss", "dpo", "--kl", "0.1", "--epochs", "3", "--steps", "2", "--quiet",
                                 "--device", "cpu", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    header = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert set(DPO_STEP_METRICS) | set(OPTIMUM_METRICS) <= set(header)
    # every value sits under its own name: the gap is beta times the KL to pi*, the DPO loss is its pg_loss
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        assert float(row["objective_gap"]) == pytest.approx(0.1 * float(row["kl_to_optimum"]), rel=1e-5)
        assert row["loss"] == row["pg_loss"] and 0 <= float(row["pair_fraction"]) <= 1
    assert float(rows[0]["loss"]) == pytest.approx(math.log(2.0), rel=1e-6)  # h = 0 at the first step
    result = runner.invoke(app, ["sweep", "--loss", "dpo", "--kl", "0.1", "--pairs", "online", "--pairs", "offline",
                                 "--pairs-per-prompt", "4", "--seeds", "2", "--epochs", "3", "--steps", "2",
                                 "--format", "csv", "--quiet", "--device", "cpu", "--out", str(tmp_path / "sweep")])
    assert result.exit_code == 0, result.output
    summary = (tmp_path / "sweep" / "summary.csv").read_text()
    assert ",online," in summary and ",offline," in summary
    assert "kl_to_optimum" in (tmp_path / "sweep" / "metrics_epoch.csv").read_text().splitlines()[0]


def test_the_trackers_response_table_is_the_enumerations():
    """lab.training.dpo.table_log_probs (one log-softmax per position, gathered) against lab.exact.varlen."""
    import torch

    import lab.policies as P
    from lab.exact import varlen
    from lab.training.dpo import table_log_probs
    from tasks.sorting import lecture_prompts

    for kind in ("factorized", "autoregressive"):
        stack = P.make_stack(kind, 5, 3, 3, 4, [torch.Generator().manual_seed(i) for i in range(2)])
        fast, exact = table_log_probs(stack, lecture_prompts()), varlen.all_log_probs(stack, lecture_prompts(),
                                                                                      torch.float64)
        assert fast.shape == exact.shape and float((fast - exact).abs().max()) < 1e-12


def test_a_sweep_of_dpo_and_grpo_keeps_every_metric(tmp_path):
    """Mixed losses train as separate batches; the merged records hold the DPO columns (empty for GRPO runs)."""
    from lab.experiments.sweep import run_sweep

    records = run_sweep(TASK, [TrainConfig(kl=0.1, **SHORT), dpo(), dpo(pairs="offline", pairs_per_prompt=4)])
    assert np.all(np.isnan(records.step_metrics["chosen_rewards"][0]))
    assert not np.all(np.isnan(records.step_metrics["loss"][1:]))
    assert np.all(np.isnan(records.epoch_metrics["kl_to_optimum"][0]))
    assert np.all(np.isfinite(records.epoch_metrics["kl_to_optimum"][1:]))
    result = CliRunner().invoke(app, ["sweep", "--loss", "clipped", "--loss", "dpo", "--kl", "0.1", "--seeds", "1",
                                      "--epochs", "2", "--steps", "1", "--format", "csv", "--quiet", "--device", "cpu",
                                      "--out", str(tmp_path / "mixed")])
    assert result.exit_code == 0, result.output
