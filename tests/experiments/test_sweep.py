"""`lab sweep` and its library (lab.experiments.sweep, lab.experiments.intervals): grid, batching by group size, summary, CLI."""

import csv
import io

import numpy as np
import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.training.config import ALWAYS_COLUMNS, OMITTED, ConfigError, TrainConfig
from lab.experiments.intervals import mean_interval, t_quantile, wilson_interval
from lab.training.records import INDEX_COLUMNS, STEP_METRICS
from lab.files.run_text import format_value
from lab.experiments.sweep import build_grid, optimal_everywhere, run_sweep, summarise
from lab.files.tables import read_table
from lab.training.train import train
from tasks.sorting import make_task

STEP_RTOL, STEP_ATOL = 1e-4, 1e-5  # as in test_batched: batched matmuls may round differently
INDEX_AND_SAMPLE_COLUMNS = ("epoch", "step", "inner_step", "mean_reward", "reward_fraction", "reward_std",
                            "zero_std_fraction")


def test_the_grid_is_every_combination_times_seeds_in_order():
    configs = build_grid(TrainConfig(epochs=3), {"delta": ["raw", "centered"], "lr": [1e-3, 1e-2]}, seeds=3)
    assert [(c.delta.value, c.lr, c.seed) for c in configs] == [
        (d, lr, s) for d in ("raw", "centered") for lr in (1e-3, 1e-2) for s in range(3)]
    assert all(c.epochs == 3 for c in configs)


@pytest.mark.parametrize("grid, seeds, words", [
    ({"delta": ["raw", "raw"]}, 2, "same value twice"),
    ({"delta": ["raw"]}, 0, "--seeds"),
    ({"epochs": [1, 2]}, 2, "cannot sweep over epochs"),
    ({"delta": ["sideways"]}, 2, "choose one of"),
])
def test_bad_grids_are_refused_with_a_message(grid, seeds, words):
    with pytest.raises(ConfigError, match=words):
        build_grid(TrainConfig(), grid, seeds)


def test_group_sizes_train_as_separate_batches_and_come_back_in_grid_order():
    """G changes tensor shapes, so each G is its own batch; every run still equals the same config alone."""
    task = make_task()
    configs = build_grid(TrainConfig(epochs=4), {"group_size": [3, 5], "delta": ["raw", "centered"]}, seeds=2)
    seen = []
    records = run_sweep(task, configs, progress=lambda done, total: seen.append((done, total)))
    # one progress over both batches (4 epochs each), in work units (lab.experiments.work), to one total
    assert len(seen) == 8 and len({total for _, total in seen}) == 1 and seen[-1][0] == pytest.approx(seen[-1][1])
    for run, config in enumerate(configs):
        assert records.configs[run] == config
        alone = train(task, config)
        np.testing.assert_array_equal(alone.epoch_metrics["mean_reward"][0], records.epoch_metrics["mean_reward"][run])
        np.testing.assert_allclose(alone.step_metrics["loss"][0], records.step_metrics["loss"][run],
                                   rtol=STEP_RTOL, atol=STEP_ATOL)


def test_t_and_wilson_intervals_match_published_values():
    """t_{0.975} from standard tables (df 1: 12.706, df 19: 2.093); Wilson 0/20 and 10/20 computed by hand."""
    assert t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-4)
    assert t_quantile(0.975, 19) == pytest.approx(2.0930, abs=1e-4)
    zero = wilson_interval(0, 20)
    assert (zero.low, zero.high) == pytest.approx((0.0, 0.16113), abs=1e-5)
    half = wilson_interval(10, 20)
    assert (half.low, half.high) == pytest.approx((0.29930, 0.70070), abs=1e-5)
    values = np.array([1.0, 2.0, 3.0, 4.0])  # mean 2.5, s = 1.29099, t_{0.975,3} = 3.18245
    assert (mean_interval(values).low, mean_interval(values).high) == pytest.approx(
        (2.5 - 3.18245 * 1.29099 / 2, 2.5 + 3.18245 * 1.29099 / 2), abs=1e-4)


def test_the_summary_counts_runs_optimal_on_every_prompt():
    task = make_task()
    configs = build_grid(TrainConfig(epochs=30, lr=5e-2), {"delta": ["centered", "raw"]}, seeds=4)
    records = run_sweep(task, configs)
    summaries = summarise(records, ["delta"])
    optimal = optimal_everywhere(records)
    assert [s.point for s in summaries] == [("centered",), ("raw",)]
    for s, runs in zip(summaries, (range(0, 4), range(4, 8))):
        assert s.seeds == 4
        assert s.optimal_fraction.estimate == optimal[list(runs)].mean()
        assert s.final_mean_reward.estimate == pytest.approx(records.final("mean_reward")[list(runs)].mean())
        assert s.final_mean_reward.low <= s.final_mean_reward.estimate <= s.final_mean_reward.high


def _rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def test_a_sweeps_seed_3_run_equals_lab_run_seed_3(tmp_path):
    """Through the CLI: the seed-3 rows of a 4-seed sweep's tables are `lab run --seed 3`'s metrics rows."""
    runner = CliRunner()
    common = ["--epochs", "6", "--steps", "3", "--quiet"]
    swept = runner.invoke(app, ["sweep", "--delta", "centered", "--delta", "raw", "--seeds", "4",
                                "--out", str(tmp_path / "sweep"), *common])
    assert swept.exit_code == 0, swept.output
    single = runner.invoke(app, ["run", "--delta", "centered", "--seed", "3", "--out", str(tmp_path / "run"), *common])
    assert single.exit_code == 0, single.output
    steps = read_table(tmp_path / "sweep" / "metrics_step.parquet")
    epochs = read_table(tmp_path / "sweep" / "metrics_epoch.parquet")
    run_rows = _rows((tmp_path / "run" / "metrics.csv").read_text())
    assert {"run", "seed", *(f"config_{n}" for n in ALWAYS_COLUMNS)} <= \
        set(steps) & set(epochs)
    for name in OMITTED:  # only a sweep with some run off their default carries them
        assert f"config_{name}" not in set(steps)
    assert len(steps["run"]) == 2 * 4 * 6 * 3 and len(epochs["run"]) == 2 * 4 * 6
    mine = (steps["seed"] == 3) & (steps["config_delta"] == "centered")
    mine_epochs = (epochs["seed"] == 3) & (epochs["config_delta"] == "centered")
    assert mine.sum() == len(run_rows) == 18 and mine_epochs.sum() == 6
    for i, (row, b) in enumerate(zip(np.flatnonzero(mine), run_rows)):
        for column, value in b.items():
            if column in STEP_METRICS or column in INDEX_COLUMNS:
                got = steps[column][row]
            else:  # an epoch metric: stored once per epoch in the sweep, repeated per step in the run
                got = epochs[column][np.flatnonzero(mine_epochs)[int(b["epoch"])]]
            if value == "":
                assert np.isnan(got), column
            elif column in INDEX_AND_SAMPLE_COLUMNS:
                assert format_value(got if column in INDEX_COLUMNS else np.float32(got)) == value, column
            else:
                assert float(got) == pytest.approx(float(value), rel=STEP_RTOL, abs=STEP_ATOL), column
    for name in ("config.json", "summary.csv", "curves.png"):
        assert (tmp_path / "sweep" / name).stat().st_size > 0
    summary = _rows((tmp_path / "sweep" / "summary.csv").read_text())
    assert [r["delta"] for r in summary] == ["centered", "raw"] and all(r["seeds"] == "4" for r in summary)


@pytest.mark.parametrize("args, words", [
    (["--seeds", "0"], "--seeds"),
    (["--delta", "raw", "--delta", "raw"], "same value twice"),
    (["--lr", "-1"], "lr must be > 0"),
    (["--delta", "sideways"], "sideways"),
])
def test_bad_sweep_input_exits_2_with_one_line_and_leaves_nothing(tmp_path, args, words):
    out = tmp_path / "s"
    result = CliRunner().invoke(app, ["sweep", "--epochs", "2", "--out", str(out), *args])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in result.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_an_existing_sweep_folder_needs_force(tmp_path):
    out = tmp_path / "s"
    out.mkdir()
    result = CliRunner().invoke(app, ["sweep", "--epochs", "2", "--seeds", "1", "--out", str(out), "--quiet"])
    assert result.exit_code == 2 and "--force" in result.output
    assert list(out.iterdir()) == []


@pytest.mark.slow
def test_reproduce_writes_every_figure_and_results_from_the_records(tmp_path):
    """`lab reproduce`'s machinery at a tiny size: all figures, and RESULTS.md's numbers come from the records."""
    from lab.experiments.reproduce import EXPERIMENTS, run_reproduction, write_figures
    from lab.experiments.verdicts import ANSWERS

    reproduction = run_reproduction(seeds=6, base=TrainConfig(epochs=3, steps=2))
    paths = write_figures(reproduction, tmp_path, ks=tuple(range(1, 9)))  # maj@k to k = 8 keeps it quick
    exploration = ["exploration_init.png", "exploration_bonus.png", "exploration_pass_at_k.png",
                   "exploration_entropy_reward.png"]
    assert sorted(p.name for p in paths) == sorted([f"{e.name}.png" for e in EXPERIMENTS if not e.exploration]
                                                   + exploration + ["length_bias.png", "critic.png", "dpo.png",
                                                                    "before_rl.png", "overoptimisation.png",
                                                                    "samplers.png", "descendants.png", "RESULTS.md"])
    text = (tmp_path / "RESULTS.md").read_text()
    assert "float32 (`--dtype`)" in text.split("\n\n")[1]  # the first paragraph names the dtype it was made in
    lecture_part, exploration_part = text.split("## Exploration", 1)
    exploration_part, length_part = exploration_part.split("## Variable length", 1)
    length_part, critic_part = length_part.split("## The critic GRPO removes", 1)
    exploration_part = exploration_part.split("## Reproducing a number", 1)[0]
    critic_part, dpo_part = critic_part.split("## GRPO with a KL penalty and DPO", 1)
    dpo_part, before_rl_part = dpo_part.split("## Before RL", 1)
    before_rl_part, rm_part = before_rl_part.split("## Reward-model over-optimisation", 1)
    rm_part, samplers_part = rm_part.split("## What is sampled, and from which policy", 1)
    rm_part = rm_part.split("## The lecture's conclusions beyond sorting", 1)[0]  # issue 36's section, its own test
    samplers_part, descendants_part = samplers_part.split("## GRPO's descendants", 1)

    def verdicts(part: str) -> list[str]:
        return [line.rsplit("**", 2)[-2] for line in part.splitlines() if line.endswith("** |")]
    assert len(verdicts(lecture_part)) == 6 and set(verdicts(lecture_part)) <= set(ANSWERS)
    assert "detectable at 80% power / needed" in lecture_part
    from lab.experiments.controls import LR_CONTROL

    assert len(verdicts(exploration_part)) == 16 + len(LR_CONTROL)
    assert "## Reproducing a number: the batch a run shares" in text
    assert set(verdicts(exploration_part)) <= set(ANSWERS)
    from lab.experiments.length_bias import SETTINGS

    assert len(verdicts(length_part)) == len(SETTINGS)
    assert {v.split(",")[0] for v in verdicts(length_part)} <= {"lengthens", "shortens", "no difference seen"}
    assert "paired t" in length_part and "0/1 reward (Dr. GRPO's setting)" in length_part
    assert len(verdicts(critic_part)) == 5 and set(verdicts(critic_part)) <= set(ANSWERS)
    assert "the critic reduces the gradient's variance" in critic_part and "t = 4" in critic_part
    assert "share of visits" in critic_part and "(lambda = 0.9)" in critic_part
    assert len(verdicts(dpo_part)) == 6 + 6 + 2 + 6 + 3
    assert set(verdicts(dpo_part)) <= set(ANSWERS)
    assert "E[r] - 0.05 KL(pi_ref || pi)" in dpo_part and "converged" in dpo_part
    assert "beta' 0.05 (beta 0.015), pi_0 (frozen)" in dpo_part  # matched beta': a KL in the loss at beta' s / C
    assert "aim at" not in dpo_part and "same optimum" not in dpo_part
    assert len(verdicts(before_rl_part)) == 9
    assert set(verdicts(before_rl_part)) <= set(ANSWERS)
    # per proxy: bon's share, bon from pi_0 and from a peaked pi_0; the optimum path; GRPO without a penalty; then
    # the KL weights against none; DPO against GRPO per set of pairs and beta
    assert len(verdicts(rm_part)) == 3 * 3 + 3 + 3 + 2 + 3 * 2
    assert set(verdicts(rm_part)) <= set(ANSWERS)
    assert "DPO on its pairs, beta 0.05" in rm_part and "(the trained runs' after every epoch" in rm_part
    assert len(verdicts(samplers_part)) == 4
    assert set(verdicts(samplers_part)) <= {"holds", "does not hold", "inconclusive", "partly", "underpowered"}
    assert len(verdicts(descendants_part)) == 6
    assert set(verdicts(descendants_part)) <= {"holds", "does not hold", "inconclusive"}
    raw = reproduction.runs["lecture_deltas", 0]
    assert mean_interval(reproduction.records.final("mean_reward")[raw]).text(3) in text
    assert len(set(reproduction.runs["baselines", 1]) & set(reproduction.runs["lecture_deltas", 1])) == 6  # trained once
    # the rules themselves: tests/experiments/test_verdicts.py (planted effects, every answer reachable)


def test_help_shows_the_defaults_of_the_grid_options_and_of_bench_runs():
    """`lab sweep --help` and `lab bench --help` show the default of every repeatable option."""
    sweep_help = " ".join(CliRunner().invoke(app, ["sweep", "--help"], terminal_width=200).output.split())
    for option, default in (("--delta", "raw"), ("--loss", "naive"), ("--reward", "inclusion-ordering"),
                            ("--kl", "0.0"), ("--clip-eps", "0.01"), ("--lr", "0.001"), ("--group-size", "10")):
        line = sweep_help.split(option + " ", 1)[1].split(" --", 1)[0]
        assert f"[default: ({default})]" in line, (option, line)
    bench_help = " ".join(CliRunner().invoke(app, ["bench", "--help"], terminal_width=200).output.split())
    assert "[default: (1 10 100 500)]" in bench_help


def test_errors_show_values_not_enum_reprs():
    result = CliRunner().invoke(app, ["sweep", "--delta", "raw", "--delta", "raw"])
    assert result.exit_code == 2 and "--delta is given the same value twice: raw, raw" in result.output
    assert "DeltaMode" not in result.output


def test_a_sweep_over_the_kl_options_has_their_columns_and_keeps_dpo_at_the_defaults(tmp_path):
    """`lab sweep --kl-estimator k1 --kl-estimator k3 --kl-in reward --kl-in loss --loss naive --loss dpo`: four
    policy-gradient points and one DPO point (its beta is no penalty: it keeps k3 in the loss), the tables with
    config_kl_estimator and config_kl_in columns."""
    result = CliRunner().invoke(app, ["sweep", "--kl", "0.1", "--kl-estimator", "k1", "--kl-estimator", "k3",
                                      "--kl-in", "reward", "--kl-in", "loss", "--loss", "naive", "--loss", "dpo",
                                      "--seeds", "1", "--epochs", "2", "--steps", "1", "--quiet", "--format", "csv",
                                      "--out", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    rows = _rows((tmp_path / "s" / "metrics_epoch.csv").read_text())
    points = {(r["config_loss"], r["config_kl_estimator"], r["config_kl_in"]) for r in rows}
    assert points == {("naive", "k1", "reward"), ("naive", "k1", "loss"), ("naive", "k3", "reward"),
                      ("naive", "k3", "loss"), ("dpo", "k3", "loss")}
