"""The first hour's frictions, each fixed as a new user would expect (what they typed, what they read)."""

from __future__ import annotations

import io
import re

from typer.testing import CliRunner

from lab.cli.commands import app
from lab.cli.progress import LineProgress


def test_another_tools_device_option_is_answered_with_the_labs():
    """`lab run --gpu` names `--device cuda` and its choices (click's own guess by spelling was `--out`)."""
    for command, typed, ours in (("run", "--gpu", "--device cuda"), ("sweep", "--cpu", "--device cpu"),
                                 ("run", "--float64", "--dtype float64")):
        result = CliRunner().invoke(app, [command, typed])
        assert result.exit_code == 2
        assert ours in result.output and "--out" not in result.output, result.output


def test_a_learned_reward_runs_last_line_gives_the_gold_reward(tmp_path):
    """Against a learned reward the mean reward is the proxy's; the summary line gives the gold reward beside it,
    with the gold's own maximum, as summary.json has it."""
    model, run = tmp_path / "rm", tmp_path / "run"
    assert CliRunner().invoke(app, ["reward-model", "--steps", "5", "--quiet", "--out", str(model)]).exit_code == 0
    result = CliRunner().invoke(app, ["run", "--reward", f"learned:{model}", "--epochs", "2", "--steps", "1",
                                      "--out", str(run)])
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    gold = re.search(r"\(proxy\), gold ([0-9.]+) / 5 exactly, greedy accuracy", last)
    summary = (run / "summary.json").read_text()
    assert gold and f'"final_gold_reward_exact": {gold.group(1)[:4]}' in summary, (last, summary)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_counts_the_work_from_its_own_start():
    """A job that spends 8 s loading before its first epoch (`lab trl`) reports that apart: the time of training
    grows each epoch, and the time left comes from it, not from the loading (which made every line read the same)."""
    clock, out = Clock(), io.StringIO()
    progress = LineProgress("trl", clock=clock, quiet_s=0, file=out)
    clock.now = 8.0
    progress(0, 4)  # training starts after 8 s of loading
    for epoch in range(1, 5):
        clock.now = 8.0 + epoch
        progress(epoch, 4)
    lines = out.getvalue().splitlines()
    assert lines[0] == "trl: 25% (1/4 epochs), 9 s, 1.0 s of training, about 3 s left", lines
    assert lines[-1] == "trl: 100% (4/4 epochs), 12 s, 4.0 s of training, about 0 s left", lines
