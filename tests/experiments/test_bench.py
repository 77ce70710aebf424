"""`lab bench` (a benchmark, not a test of speed): the structure of its result, at a tiny size."""

import torch

from lab.experiments.bench import bench, bench_report
from lab.experiments.bench_rows import (critic_ratios, dpo_ratios, method_ratios, policy_pair_ratios, policy_ratios,
                                        row_label)
from lab.training.config import TrainConfig
from lab.training.lecture_loop import lecture_train


def test_bench_reports_every_size_with_consistent_ratios():
    threads = torch.get_num_threads()
    result = bench(sizes=(1, 3), repeats=1, threads=1, config=TrainConfig(epochs=2, steps=2))
    assert torch.get_num_threads() == threads  # the thread count is restored
    assert result.threads == 1 and [(r.policy, r.delta, r.runs, r.loss) for r in result.rows] == [
        ("factorized", None, 1, "naive"), ("factorized", None, 3, "naive"), ("autoregressive", None, 1, "naive"),
        ("autoregressive", None, 3, "naive"), ("factorized", "gae", 1, "naive"), ("factorized", "gae", 3, "naive"),
        ("factorized", None, 1, "dpo"), ("factorized", None, 3, "dpo"), ("factorized", None, 1, "sft"),
        ("factorized", None, 3, "sft"), ("factorized", None, 1, "expert-iteration"),
        ("factorized", None, 3, "expert-iteration"), ("factorized", None, 1, "naive"), ("factorized", None, 3, "naive"),
        ("factorized", None, 1, "naive"), ("factorized", None, 3, "naive")]
    assert [r.clipped for r in result.rows] == [False] * 12 + [True] * 2 + [False] * 2
    assert [r.learned for r in result.rows] == [False] * 14 + [True] * 2
    for row in result.rows:
        single = result.single_run_seconds[row_label("cpu", row.policy, row.delta, row.loss, row.clipped,
                                                     row.learned)]
        assert row.runs_per_second == row.runs / row.seconds
        assert row.speedup_vs_lecture == row.runs * result.lecture_seconds_per_run / row.seconds
        assert row.speedup_vs_one_at_a_time == row.runs * single / row.seconds
    ratios = policy_ratios(result)
    assert ratios[("cpu", 3)] == result.rows[3].seconds / result.rows[1].seconds
    assert critic_ratios(result)[("cpu", 3)] == result.rows[5].seconds / result.rows[1].seconds
    report = bench_report(result)
    assert "set_num_threads(1)" in report and "lecture" in report and len(report.splitlines()) == 3 + 8 + 1 + 16 + 3 + 4
    assert "cpu, gae" in report and "with a learned critic (gae)" in report
    assert "cpu, autoregressive" in report and "autoregressive / factorised seconds per run" in report
    assert dpo_ratios(result)[("cpu", 3)] == result.rows[7].seconds / result.rows[1].seconds
    assert "cpu, dpo" in report and "DPO (online, beta 0.1) / GRPO seconds per run" in report
    methods = method_ratios(result)
    assert methods[("sft", "cpu", 3)] == result.rows[9].seconds / result.rows[1].seconds
    assert methods[("expert-iteration", "cpu", 3)] == result.rows[11].seconds / result.rows[1].seconds
    assert methods[("max-grad-norm", "cpu", 3)] == result.rows[13].seconds / result.rows[1].seconds
    assert "cpu, max-grad-norm" in report and "sft / GRPO seconds per run" in report
    assert methods[("learned reward", "cpu", 3)] == result.rows[15].seconds / result.rows[1].seconds
    assert "cpu, learned reward" in report and "learned reward / GRPO seconds per run" in report


def test_the_policy_ratio_pairs_each_rounds_tries_and_takes_their_median():
    """Each round of the round robin times the cases in turn, every other round in reverse, so a round's two tries
    are a pair in alternating order; the report gives the median of the pairs' ratios beside the best tries'
    (mutant tried: pairing a round's autoregressive try with the other round's factorised one fails)."""
    import statistics

    result = bench(sizes=(2,), repeats=2, threads=1, config=TrainConfig(epochs=1, steps=1), dpo=False, critic=False,
                   methods=False, lecture_seconds={1: 1.0})
    factorised, autoregressive = result.rows
    assert len(factorised.tries) == len(autoregressive.tries) == 2
    assert factorised.seconds == min(factorised.tries) and autoregressive.seconds == min(autoregressive.tries)
    pairs = policy_pair_ratios(result)[("cpu", 2)]
    assert pairs == [a / f for a, f in zip(autoregressive.tries, factorised.tries)]
    assert f"({statistics.median(pairs):.2f}x of 2) at R = 2 on cpu" in bench_report(result)


def test_the_lecture_loop_learns_its_reward_like_the_lab():
    """The baseline is a real training loop: over the lecture's 1000 steps the mean reward rises."""
    log = lecture_train(TrainConfig(delta="centered", seed=5))
    assert len(log) == 1000
    first = sum(r["mean_reward"] for r in log[:100]) / 100
    last = sum(r["mean_reward"] for r in log[-100:]) / 100
    assert last > first + 0.5


def test_the_end_to_end_row_times_a_real_sweep_and_measures_its_folder():
    """`lab bench`'s end-to-end row runs `lab sweep` in a fresh process (tiny here) and sizes its folder."""
    from lab.experiments.endtoend import end_to_end, end_to_end_report

    row = end_to_end(runs=3, repeats=1, extra=["--epochs", "2", "--steps", "2"])
    assert row.runs == 3 and row.seconds > 0
    assert {"metrics_step.parquet", "metrics_epoch.parquet", "summary.csv", "curves.png"} <= set(row.files)
    assert row.folder_bytes == sum(row.files.values())
    assert row.speedup_vs_lecture(0.5) == 3 * 0.5 / row.seconds
    assert "3 runs" in end_to_end_report(row, 0.5) and "MB" in end_to_end_report(row, 0.5)
