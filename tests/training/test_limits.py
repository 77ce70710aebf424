"""Sizes are checked against the machine before anything is allocated (`lab.training.limits`).

`--threads 100000` used to segfault silently, `--group-size 1000000000` and `--dim 100000` gave
50-line allocation tracebacks, `--epochs 10**12` ran silently forever where stderr is no terminal.
"""

import io
import os

import pytest
from typer.testing import CliRunner

import lab.cli.run_command
import lab.training.limits
from lab.cli.commands import app
from lab.cli.task_options import prompts_label
from lab.cli.progress import LineProgress
from lab.cli.run_command import default_run_name
from lab.training.config import TrainConfig
from lab.training.limits import cpu_cores, estimate

SHORT = ["--epochs", "1", "--steps", "1", "--quiet"]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def one_line(result, *fragments) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("args", [
    ["run", "--group-size", "1000000000"],
    ["run", "--dim", "100000"],
    ["run", "--epochs", str(10**12)],
    ["run", "--prompts", "random", "--num-prompts", str(10**9), "--vocab-size", "1000", "--prompt-length", "9"],
    ["sweep", "--seeds", str(10**8)],
    ["reproduce", "--seeds", str(10**9), "--out", "figs"],
    ["bench", "--runs", str(10**9)],
])
def test_absurd_sizes_are_refused_up_front_with_the_estimate(tmp_path, args):
    message = one_line(CliRunner().invoke(app, [*args, "--quiet"] if args[0] != "bench" else args),
                       "needs about", "available")
    assert "GB" in message or "TB" in message
    assert os.listdir(tmp_path) == []


def test_the_estimate_refuses_past_the_available_memory_and_not_before(monkeypatch):
    """The limit is the machine's: a run that fits passes, the same run on a smaller machine is refused."""
    need = sum(estimate([TrainConfig(epochs=1, steps=1)], 5, 3, 3).values())
    monkeypatch.setattr(lab.training.limits, "available_memory", lambda: need + 1)
    assert CliRunner().invoke(app, ["run", *SHORT, "--out", "fits"]).exit_code == 0
    monkeypatch.setattr(lab.training.limits, "available_memory", lambda: need - 1)
    one_line(CliRunner().invoke(app, ["run", *SHORT, "--out", "refused"]), "needs about")


def test_the_estimate_grows_with_every_size():
    base = TrainConfig()
    total = lambda configs, vocab=5, count=3, length=3: sum(estimate(configs, vocab, count, length).values())  # noqa: E731
    reference = total([base])
    for bigger in ([base.replace(group_size=100)], [base.replace(dim=100)], [base.replace(epochs=1000)],
                   [base.replace(steps=100)], [base.replace(seed=s) for s in range(10)]):
        assert total(bigger) > reference
    assert total([base], vocab=50) > reference and total([base], count=30) > reference


@pytest.mark.parametrize("command", [["sweep", "--seeds", "1"], ["bench", "--runs", "1", "--repeats", "1"]])
@pytest.mark.parametrize("threads", ["0", "-1", "100000"])
def test_threads_must_lie_within_the_cores(tmp_path, command, threads):
    one_line(CliRunner().invoke(app, [*command, "--threads", threads]), f"from 1 to {cpu_cores()}")
    assert os.listdir(tmp_path) == []


def test_progress_lines_without_a_terminal_every_tenth_and_when_overdue():
    """A long job prints one line per 10% (and at least once a minute) to a log; a short one prints nothing."""
    now = [0.0]
    out = io.StringIO()
    progress = LineProgress("training", quiet_s=5, every_s=60, clock=lambda: now[0], file=out)
    for done in range(1, 101):  # 100 epochs, one second each
        now[0] = float(done)
        progress(done, 100)
    lines = out.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == [f"{p}%" for p in range(10, 101, 10)]
    assert lines[-1].startswith("training: 100% (100/100 epochs), 100 s")

    now[0] = 0.0
    slow = LineProgress("training", quiet_s=5, every_s=60, clock=lambda: now[0], file=io.StringIO())
    for minute in range(1, 4):  # 10**12 epochs: no tenth in sight, still a line a minute
        now[0] = 60.0 * minute
        slow(minute, 10**12)
    assert len(slow.file.getvalue().splitlines()) == 3

    quick = LineProgress("training", quiet_s=5, clock=lambda: 0.5, file=io.StringIO())
    for done in range(1, 11):
        quick(done, 10)
    assert quick.file.getvalue() == ""


def test_quiet_means_no_progress_and_a_log_gets_lines(monkeypatch):
    seen = []
    monkeypatch.setattr(lab.cli.run_command, "run_with_progress",
                        lambda quiet, label, total, fn: seen.append(quiet) or fn(None))
    CliRunner().invoke(app, ["run", *SHORT, "--out", "q"])
    assert seen == [True]
    from lab.cli.progress import run_with_progress
    kinds = []
    run_with_progress(False, "x", 10, lambda progress: kinds.append(type(progress).__name__))
    assert kinds == ["LineProgress"]  # pytest's stderr is no terminal: lines, not a bar


def test_default_names_tell_different_prompt_experiments_apart():
    """The default run name tells apart the prompts, vocabulary, held-out count and prompt seed."""
    config = TrainConfig()
    variants = [{}, {"prompts": "random"}, {"prompts": "random", "num_prompts": 5},
                {"prompts": "[[3,1,0,2]]"}, {"prompts": "[[3,1,0,1]]"}, {"vocab_size": 7},
                {"heldout": 10}, {"heldout": 10, "prompt_seed": 1}]
    names = [default_run_name(config, v) for v in variants]
    assert len(set(names)) == len(variants)
    assert names[0] == "raw-naive-inclusion-ordering-seed5"  # the lecture's run keeps its name
    assert prompts_label({"heldout": 10, "prompt_seed": 1}) == "heldout10-prompt-seed1"


def test_sweep_default_names_include_the_prompts(tmp_path):
    for extra in ([], ["--vocab-size", "7"]):
        assert CliRunner().invoke(app, ["sweep", *SHORT, "--seeds", "1", *extra]).exit_code == 0
    assert sorted(os.listdir(tmp_path / "runs")) == ["sweep-raw-naive-inclusion-ordering-epochs1-steps1-1seeds",
                                                     "sweep-raw-naive-inclusion-ordering-epochs1-steps1-vocab-size7-1seeds"]


def test_the_estimate_counts_the_autoregressive_policy_and_its_prefix_tree():
    """Its previous-token matrices, longer responses with EOS, and the exact prefix tree (only where it is built)."""
    base, ar = TrainConfig(), TrainConfig(policy="autoregressive")
    factorised, autoregressive = (estimate([c], 5, 3, 3, seeds=100)["device"] for c in (base, ar))
    tree = 100 * 3 * sum(5 ** q for q in range(5)) * 6 * 4 * 8
    assert autoregressive > factorised + tree
    past_limit = estimate([ar.replace(max_length=9)], 5, 3, 3, seeds=100)["device"]  # 5^9 responses: no tree
    assert past_limit < 100 * 3 * sum(5 ** q for q in range(9)) * 6 * 4


def test_a_huge_max_length_is_estimated_at_once_and_refused():
    """`--max-length 99999999999` used to hang in a sum of big powers; the estimate is now a few terms: it runs
    under 10,000 Python lines (counted by a trace function that stops it past the bound; the sum of powers alone
    would run one line per term, 10^11 of them)."""
    import sys
    lines = 0

    def count(frame, event, arg):
        nonlocal lines
        lines += event == "line"
        if lines > 10_000:
            raise RuntimeError("the estimate loops over the response lengths")
        return count

    sys.settrace(count)
    try:
        need = estimate([TrainConfig(policy="autoregressive", max_length=99_999_999_999)], 5, 3, 3)
    finally:
        sys.settrace(None)
    assert need["device"] > 10**20 and lines > 0
    one_line(CliRunner().invoke(app, ["run", "--policy", "autoregressive", "--max-length", "99999999999",
                                      "--quiet"]), "needs about", "--max-length")


def test_space_within_agrees_with_the_full_sum():
    from lab.exact.varlen import space_size
    from lab.training.limits import space_within
    for vocab in (1, 2, 5):
        for length in range(0, 12):
            assert space_within(vocab, length, 4096) == (space_size(vocab, length) <= 4096)


@pytest.mark.parametrize("args, advice, absent", [
    (["reproduce", "--seeds", str(10**9), "--out", "figs", "--quiet"], "lower --seeds", "--group-size"),
    (["bench", "--sweep-runs", "99999999999", "--runs", "1", "--repeats", "1"], "--sweep-runs", "--group-size"),
])
def test_memory_errors_advise_the_commands_own_options(tmp_path, monkeypatch, args, advice, absent):
    """`lab reproduce` and `lab bench` have no --group-size; the end-to-end sweep of bench is sized before any timing
    (on a machine with 16 GB available, so the message does not depend on this one's free memory)."""
    import lab.experiments.bench
    monkeypatch.setattr(lab.training.limits, "available_memory", lambda: 16 * 10**9)
    monkeypatch.setattr(lab.experiments.bench, "lecture_baseline",
                        lambda **kwargs: (_ for _ in ()).throw(AssertionError("timing started")))
    message = one_line(CliRunner().invoke(app, args), "needs about", advice)
    assert absent not in message


def _sweep_name(grid=None, base=None, prompts=None, seeds=2):
    from lab.cli.task_options import PROMPT_DEFAULTS
    from lab.cli.sweep_command import default_sweep_name
    from lab.experiments.sweep import build_grid
    points = build_grid(base or TrainConfig(), grid or {}, 1)
    return default_sweep_name(points, {**PROMPT_DEFAULTS, **(prompts or {})}, seeds)


def test_default_sweep_names_differ_wherever_the_settings_do():
    """`--epochs 3`, `--kl 0.1`, an autoregressive sweep, two different --lr grids and two learning rates equal
    to 8 digits each get their own folder; the same prompts spelt differently share one."""
    names = [_sweep_name(), _sweep_name(base=TrainConfig(epochs=3)), _sweep_name(grid={"kl": [0.1]}),
             _sweep_name(base=TrainConfig(policy="autoregressive")), _sweep_name(grid={"lr": [0.01, 0.02]}),
             _sweep_name(grid={"lr": [0.03, 0.04]}), _sweep_name(grid={"lr": [0.012345671]}),
             _sweep_name(grid={"lr": [0.012345669]})]
    assert len(set(names)) == len(names), names
    assert "lr0.01+0.02" in names[4] and "lr0.012345671" in names[6]
    assert _sweep_name(prompts={"prompts": "[[1,0,2]]"}) == _sweep_name(prompts={"prompts": "[[1, 0, 2]]"})
    assert default_run_name(TrainConfig(), {"prompts": "[[1,0,2]]"}) == \
        default_run_name(TrainConfig(), {"prompts": " [[1, 0,\n2]]"})
    assert default_run_name(TrainConfig(lr=0.012345671)) != default_run_name(TrainConfig(lr=0.012345669))


def test_an_over_long_default_name_becomes_a_hash_and_the_user_is_told_why(tmp_path):
    """Forty learning rates make a name past the file system's limit: the folder is named by a hash of the
    settings (different settings, different hash) and a note says so, not "choose a shorter name"."""
    many = [0.011 + i / 1000 for i in range(40)]
    name = _sweep_name(grid={"lr": many})
    assert name.startswith("sweep-config") and name.endswith("-2seeds") and len(name) < 60
    assert name != _sweep_name(grid={"lr": many[:-1]})
    args = [arg for lr in many[:30] for arg in ("--lr", repr(lr))]
    result = CliRunner().invoke(app, ["sweep", "--epochs", "1", "--steps", "1", "--seeds", "1", *args])
    assert result.exit_code == 0, result.output
    assert "named by a hash" in result.output and "shorter name" not in result.output
    assert os.listdir(tmp_path / "runs")[0].startswith("sweep-config")
