"""What the commands' help promises, and the defaults it names, kept true.

    reproduce: its fewest seeds (in its help) is the lecture's seed + 1; by default it writes
               runs/reproduce-<N>seeds, never the tracked figures/ unless told `--out figures`
    run, sweep: the exit codes in their help include 143 (SIGTERM)
    run: `--delta` and `--loss` list every mode with its entry's help, read off the tables (`lab.core.modes`)
    bench --threads N: every figure it prints at N threads, the lecture-style loop's too
"""

import re

from typer.testing import CliRunner

from lab.cli import app
from lab.cli.reproduce_command import MIN_SEEDS
from lab.core.modes import DeltaMode, TrainingLoss
from lab.experiments.reproduce import LECTURE_SEED


def help_text(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_reproduces_help_states_its_fewest_seeds_and_that_is_what_it_accepts(tmp_path, monkeypatch):
    assert MIN_SEEDS == LECTURE_SEED + 1
    assert f"at least {MIN_SEEDS}" in help_text("reproduce")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["reproduce", "--seeds", str(MIN_SEEDS - 1), "--quiet"])
    assert result.exit_code == 2 and f"must be > {LECTURE_SEED}" in result.output


def test_reproduce_writes_under_runs_by_default_and_figures_only_when_asked(tmp_path, monkeypatch):
    """A file of the user's where the default folder would go is refused before any training, naming that
    folder; figures/ is not touched."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "RESULTS.md").write_text("mine")
    default = tmp_path / "runs" / "reproduce-7seeds"
    default.mkdir(parents=True)
    (default / "RESULTS.md").write_text("mine too")
    result = CliRunner().invoke(app, ["reproduce", "--seeds", "7", "--quiet"])
    assert result.exit_code == 2 and "runs/reproduce-7seeds" in result.output, result.output
    asked = CliRunner().invoke(app, ["reproduce", "--seeds", "7", "--quiet", "--out", "figures"])
    assert asked.exit_code == 2 and "figures" in asked.output and "RESULTS.md" in asked.output
    assert (tmp_path / "figures" / "RESULTS.md").read_text() == "mine"
    assert "runs/reproduce-<N>seeds" in help_text("reproduce")


def test_run_and_sweep_help_list_the_exit_code_of_sigterm():
    for command in ("run", "sweep"):
        assert re.search(r"143 terminated \(SIGTERM\)", help_text(command)), command


def test_bench_times_the_lecture_loop_at_the_threads_asked_for(monkeypatch):
    import lab.experiments.bench as bench_module

    calls = {}

    def lecture_baseline(config=None, threads=(), repeats=3, progress=None):
        calls["lecture"] = tuple(threads)
        return {count: 1.0 for count in threads}

    def bench(sizes, devices, threads, repeats, lecture_seconds, progress=None):
        calls.setdefault("runs", []).append(threads)
        return bench_module.BenchResult(threads, bench_module.TrainConfig(), 1.0, {},
                                        lecture_seconds_by_threads=lecture_seconds)

    monkeypatch.setattr(bench_module, "lecture_baseline", lecture_baseline)
    monkeypatch.setattr(bench_module, "bench", bench)
    result = CliRunner().invoke(app, ["bench", "--threads", "1", "--sweep-runs", "0", "--loaded-runs", "0", "--no-trl-row"])
    assert result.exit_code == 0, result.output
    assert calls == {"lecture": (1,), "runs": [1]}
    assert "1.000 s at 1 thread" in result.output and "at 2 threads" not in result.output


def test_reproduces_progress_reaches_its_end_only_once_the_figures_are_written(tmp_path, monkeypatch):
    """Training reports up to its share; the figures' stage (`figures_work`) completes the bar once written."""
    import types

    import lab.cli.reproduce_command as command
    import lab.experiments.reproduce as rep

    seen, written = [], []

    def run_reproduction(seeds, base, device, progress, after, tasks=None):
        progress(3.0, 3.0 + after)  # all the training done
        return types.SimpleNamespace(records=types.SimpleNamespace(num_runs=1, seconds=0.0))

    def write_figures(reproduction, out):
        written.append(len(seen))
        (out / "RESULTS.md").write_text("results")
        return [out / "RESULTS.md"]

    monkeypatch.setattr(rep, "run_reproduction", run_reproduction)
    monkeypatch.setattr(rep, "write_figures", write_figures)
    monkeypatch.setattr(command, "run_with_progress",
                        lambda quiet, label, total, fn, unit: fn(lambda done, of: seen.append((done, of))))
    result = CliRunner().invoke(app, ["reproduce", "--seeds", "6", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    total = 3.0 + rep.figures_work(6)
    assert seen == [(3.0, total), (total, total)] and written == [1]
    assert (tmp_path / "out" / "RESULTS.md").read_text() == "results"


def test_run_help_lists_every_delta_mode_and_loss_with_its_tables_help():
    """The choices and what each does come from the entries, not from prose: every member's `name: help` is in
    `lab run --help`, in the table's order (a mode added to the table shows with no other edit)."""
    text = help_text("run")
    for table in (DeltaMode, TrainingLoss):
        lines = [f"{m.value}: {' '.join(m.entry.help.split())}" for m in table]
        places = [text.find(line) for line in lines]
        assert -1 not in places, [line for line, at in zip(lines, places) if at < 0]
        assert places == sorted(places), table
