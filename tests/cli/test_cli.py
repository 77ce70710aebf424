"""`lab run`: the run folder, reproducibility, and one-line errors for bad input.

Every test works in its own `tmp_path` (also the working directory), so "no run folder left behind"
is checked as "the folder holds nothing new", hidden partial folders included.
"""

import csv
import io
import json
import math
import os
import shlex

import pytest
import torch
from typer.testing import CliRunner

import lab.training.train
import lab.figures.plots
from lab.cli.commands import app
from lab.training.config import TrainConfig
from lab.policies import load_policy
from lab.training.records import METRIC_COLUMNS

SHORT = ["--epochs", "2", "--steps", "2"]
RUN_FILES = {"config.json", "metrics.csv", "samples.txt", "summary.json", "policy.pt", "curves.png", ".lab-output"}


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def invoke(*args: str):
    return CliRunner().invoke(app, ["run", *args])


def contents(folder) -> set[str]:
    """Every name in a folder, hidden ones included."""
    return set(os.listdir(folder))


def metrics_rows(folder) -> list[dict]:
    return list(csv.DictReader(io.StringIO((folder / "metrics.csv").read_text())))


def assert_one_line_error(result, expected: str):
    """Exit code 2, exactly one non-empty line that names the problem, no traceback."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and expected in lines[0], lines[0]
    assert "Traceback" not in result.output


def test_run_writes_the_documented_folder(tmp_path):
    """A run folder holds config.json, metrics.csv, samples.txt, summary.json, policy.pt, curves.png."""
    out = tmp_path / "run"
    result = invoke(*SHORT, "--delta", "centered", "--loss", "clipped", "--seed", "3", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert contents(tmp_path) == {"run"} and contents(out) == RUN_FILES
    summary_lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(summary_lines) == 1 and "final mean reward" in summary_lines[0] and "greedy accuracy" in summary_lines[0]

    config = json.loads((out / "config.json").read_text())
    assert TrainConfig.from_dict(config["config"]) == TrainConfig(epochs=2, steps=2, delta="centered",
                                                                  loss="clipped", seed=3)
    assert config["task"]["prompts"] == [[1, 0, 2], [3, 2, 4], [1, 2, 3]] and config["device"] == "cpu"

    rows = metrics_rows(out)
    assert list(rows[0]) == list(METRIC_COLUMNS)
    assert {"epoch", "step", "loss", "mean_reward"} <= set(rows[0])
    assert [(int(r["epoch"]), int(r["step"])) for r in rows] == [(0, 0), (0, 1), (1, 2), (1, 3)]
    for row in rows:
        for name, value in row.items():
            if name.startswith("heldout"):
                assert value == ""  # no held-out prompts in this run
            elif name not in ("correct_length", "incorrect_length") or value:  # empty in epochs without such samples
                assert math.isfinite(float(value)), name

    summary = json.loads((out / "summary.json").read_text())
    assert summary["optimum"] == 5.0 and 0 <= summary["final_greedy_accuracy"] <= 1
    assert summary["final_mean_reward"] == pytest.approx(float(rows[-1]["mean_reward"]))
    policy = load_policy(out / "policy.pt")  # the final policy: its argmax is the summary's greedy response
    greedy = policy(torch.tensor(config["task"]["prompts"])).argmax(-1).tolist()
    assert greedy == summary["final_greedy_responses"]

    samples = (out / "samples.txt").read_text()
    assert samples.startswith("== epoch 0 ==") and "== epoch 1 ==" in samples and "prompt [3, 2, 4]" in samples
    assert samples.count("  response ") == 2 * 3 * 10  # two kept epochs x 3 prompts x G = 10
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_folder_permissions_follow_the_umask(tmp_path):
    """Results are ordinary files: readable by whoever may read the folder (not the 0600 of a temp file)."""
    old = os.umask(0o022)
    try:
        assert invoke(*SHORT, "--quiet", "--out", str(tmp_path / "run")).exit_code == 0
    finally:
        os.umask(old)
    assert (tmp_path / "run").stat().st_mode & 0o777 == 0o755
    for name in RUN_FILES:
        assert (tmp_path / "run" / name).stat().st_mode & 0o777 == 0o644, name


def test_default_run_folder_is_named_after_the_settings(tmp_path):
    """The default run folder is runs/<settings>-seed<k>."""
    result = invoke(*SHORT, "--quiet", "--delta", "centered", "--loss", "clipped")
    assert result.exit_code == 0, result.output
    assert result.output == ""  # --quiet: no summary line
    assert contents(tmp_path / "runs") == {"centered-clipped-inclusion-ordering-epochs2-steps2-seed5"}


def test_the_kl_options_are_named_recorded_and_rerun(tmp_path):
    """--kl-estimator and --kl-in appear in the default name and config.json only when off their defaults (k3 in
    the loss), and config.json's rerun line repeats such a run byte for byte; the other placement trains another
    run."""
    args = [*SHORT, "--quiet", "--delta", "centered", "--kl", "0.2", "--kl-period", "0"]
    assert invoke(*args).exit_code == 0
    assert invoke(*args, "--kl-estimator", "k1", "--kl-in", "reward").exit_code == 0
    default, chosen = sorted(contents(tmp_path / "runs"), key=len)
    assert "estimator" not in default and "reward" not in default.replace("inclusion-ordering", "")
    assert "estimatork1" in chosen and "inreward" in chosen
    plain = json.loads((tmp_path / "runs" / default / "config.json").read_text())
    config = json.loads((tmp_path / "runs" / chosen / "config.json").read_text())
    assert "kl_estimator" not in plain["config"] and "kl_in" not in plain["config"]
    assert (config["config"]["kl_estimator"], config["config"]["kl_in"]) == ("k1", "reward")
    words = shlex.split(config["rerun"])
    assert "--kl-in" in words and "--kl-estimator" in words
    result = CliRunner().invoke(app, [*words[1:], "--quiet", "--out", str(tmp_path / "again")])
    assert result.exit_code == 0, result.output
    again, first = tmp_path / "again" / "metrics.csv", tmp_path / "runs" / chosen / "metrics.csv"
    assert again.read_bytes() == first.read_bytes() != (tmp_path / "runs" / default / "metrics.csv").read_bytes()


def test_two_runs_with_the_same_seed_give_byte_identical_metrics(tmp_path):
    """The same config and seed give a byte-identical metrics.csv on the CPU."""
    args = [*SHORT, "--quiet", "--delta", "normalized", "--loss", "unclipped", "--kl", "0.1", "--kl-period", "1"]
    assert invoke(*args, "--out", str(tmp_path / "a")).exit_code == 0
    assert invoke(*args, "--out", str(tmp_path / "b")).exit_code == 0
    assert (tmp_path / "a" / "metrics.csv").read_bytes() == (tmp_path / "b" / "metrics.csv").read_bytes()
    assert (tmp_path / "a" / "samples.txt").read_bytes() == (tmp_path / "b" / "samples.txt").read_bytes()
    assert invoke(*args, "--seed", "6", "--out", str(tmp_path / "c")).exit_code == 0
    assert (tmp_path / "c" / "metrics.csv").read_bytes() != (tmp_path / "a" / "metrics.csv").read_bytes()


def test_own_prompts_run_and_the_rerun_command_reproduces_the_run(tmp_path):
    """`--prompts '[[3,1,0,2],[2,2,0,1]]'` works, and config.json's rerun line repeats it exactly."""
    first = tmp_path / "first"
    result = invoke(*SHORT, "--quiet", "--prompts", "[[3,1,0,2],[2,2,0,1]]", "--delta", "loo", "--loss", "clipped",
                    "--clip-eps", "0.05", "--lr", "0.003", "--kl", "0.2", "--kl-period", "0", "--group-size", "4",
                    "--dim", "6", "--reward", "blended", "--seed", "11", "--out", str(first))
    assert result.exit_code == 0, result.output
    config = json.loads((first / "config.json").read_text())
    assert config["task"]["prompts"] == [[3, 1, 0, 2], [2, 2, 0, 1]]
    assert json.loads((first / "summary.json").read_text())["optimum"] == 4 + 0.5 * 3  # blended, length 4
    words = shlex.split(config["rerun"])
    assert words[:2] == ["lab", "run"]
    again = tmp_path / "again"
    result = CliRunner().invoke(app, [*words[1:], "--quiet", "--out", str(again)])
    assert result.exit_code == 0, result.output
    assert (again / "metrics.csv").read_bytes() == (first / "metrics.csv").read_bytes()
    assert json.loads((again / "config.json").read_text())["config"] == config["config"]


def test_random_prompts_with_heldout_prompts(tmp_path):
    """`--prompts random` draws distinct prompts; `--heldout` fills the held-out columns."""
    out = tmp_path / "run"
    result = invoke(*SHORT, "--quiet", "--prompts", "random", "--num-prompts", "4", "--prompt-length", "4",
                    "--vocab-size", "6", "--heldout", "3", "--prompt-seed", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    task = json.loads((out / "config.json").read_text())["task"]
    prompts, held = task["prompts"], task["eval_prompts"]
    assert len(prompts) == 4 and len(held) == 3 and all(len(p) == 4 for p in prompts + held)
    assert len({*map(tuple, prompts)}) == 4 and not {*map(tuple, prompts)} & {*map(tuple, held)}
    assert all(0 <= t < 6 for p in prompts + held for t in p)
    for row in metrics_rows(out):
        assert 0 <= float(row["heldout_greedy_accuracy"]) <= 1
        assert math.isfinite(float(row["heldout_greedy_reward"]))


BAD_INPUT = [
    (["--delta", "mean"], "--delta"),
    (["--loss", "ppo"], "--loss"),
    (["--reward", "length"], "--reward"),
    (["--device", "tpu"], "--device"),
    (["--epochs", "0"], "--epochs must be"),
    (["--epochs", "-2"], "--epochs must be"),
    (["--steps", "0"], "--steps must be"),
    (["--group-size", "0"], "--group-size must be"),
    (["--dim", "0"], "--dim must be"),
    (["--prompts", "random", "--num-prompts", "0"], "--num-prompts must be"),
    (["--prompts", "random", "--prompt-length", "0"], "--prompt-length must be"),
    (["--vocab-size", "0"], "--vocab-size must be"),
    (["--lr", "0"], "--lr must be > 0"),
    (["--lr", "-0.001"], "--lr must be > 0"),
    (["--lr", "inf"], "--lr must be > 0 and finite"),
    (["--clip-eps", "0"], "--clip-eps must lie in (0, 1)"),
    (["--clip-eps", "1"], "--clip-eps must lie in (0, 1)"),
    (["--clip-eps", "-0.2"], "--clip-eps must lie in (0, 1)"),
    (["--kl", "-0.1"], "--kl (beta) must be >= 0"),
    (["--kl", "inf"], "--kl (beta) must be >= 0 and finite"),
    (["--kl-period", "-1"], "--kl-period must be >= 0"),
    (["--group-size", "1", "--delta", "centered"], "needs --group-size >= 2"),
    (["--group-size", "1", "--delta", "normalized"], "needs --group-size >= 2"),
    (["--group-size", "1", "--delta", "loo"], "needs --group-size >= 2"),
    (["--prompts", "[[5,1,0]]"], "must lie in 0..4"),
    (["--prompts", "[[1,0,2]]", "--vocab-size", "2"], "must lie in 0..1"),
    (["--prompts", "[[1,0,2],[1,0]]"], "different lengths"),
    (["--prompts", "[[1,0,2"], "cannot read prompts"),
    (["--prompts", "sorted"], "cannot read prompts"),
    (["--prompts", "[[0.5,1]]"], "not a list of non-empty integer lists"),
    (["--prompts", "random", "--vocab-size", "2", "--prompt-length", "1", "--num-prompts", "3"], "--num-prompts must be at most 2"),
    (["--heldout", "-1"], "--heldout must be >= 0"),
    (["--seed", str(2**64)], "--seed must be an integer from -2**63 to 2**64 - 1"),
    (["--prompt-seed", str(-2**63 - 1)], "--prompt-seed must be an integer"),
    (["--epochs", "many"], "--epochs"),
    (["--lr", "fast"], "--lr"),
    (["--seed", "1.5"], "--seed"),
    (["--epochs"], "--epochs"),
    (["--colour", "red"], "--colour"),
    (["--kl-estimator", "k4"], "--kl-estimator"),
    (["--kl-in", "advantage"], "--kl-in"),
    (["--loss", "dpo", "--kl", "0.1", "--kl-in", "reward"], "--kl-in applies to the policy-gradient losses"),
    (["--loss", "dpo", "--kl", "0.1", "--kl-estimator", "k1"], "--kl-estimator applies to the policy-gradient"),
]


@pytest.mark.parametrize("args, expected", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(tmp_path, args, expected):
    """Unknown choices, sizes <= 0, lr <= 0, clip eps outside (0, 1), negative kl, a group of
    one with a group mode, bad prompts: exit code 2, one line naming the problem, no run folder."""
    assert_one_line_error(invoke(*SHORT, *args, "--out", str(tmp_path / "run")), expected)
    assert contents(tmp_path) == set()


def test_cuda_without_cuda_is_one_line_exit_2(tmp_path, monkeypatch):
    """--device cuda where torch finds no CUDA (forced here, so it holds on a GPU machine too)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert_one_line_error(invoke(*SHORT, "--device", "cuda", "--out", str(tmp_path / "run")), "no CUDA device")
    assert contents(tmp_path) == set()


def test_existing_run_folder_needs_force(tmp_path):
    """An existing run folder is refused without --force, untouched; --force
    replaces a folder the lab wrote, and never one holding a file the lab did not write."""
    out = tmp_path / "run"
    assert invoke(*SHORT, "--quiet", "--seed", "1", "--out", str(out)).exit_code == 0
    first = (out / "metrics.csv").read_text()
    assert_one_line_error(invoke(*SHORT, "--out", str(out)), "already exists; pass --force")
    assert (out / "metrics.csv").read_text() == first
    result = invoke(*SHORT, "--quiet", "--force", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert contents(tmp_path) == {"run"} and contents(out) == RUN_FILES
    assert (out / "metrics.csv").read_text() != first  # seed 5 replaced seed 1

    (out / "notes.txt").write_text("my notes")
    assert_one_line_error(invoke(*SHORT, "--force", "--out", str(out)), "did not write")
    assert (out / "notes.txt").read_text() == "my notes" and contents(out) == RUN_FILES | {"notes.txt"}


def test_an_out_path_that_is_a_file_is_refused_even_with_force(tmp_path):
    """--force replaces a run folder, never some other file, and leaves no partial folder."""
    (tmp_path / "notes.txt").write_text("not a run")
    for force in ([], ["--force"]):
        assert_one_line_error(invoke(*SHORT, *force, "--out", str(tmp_path / "notes.txt")), "is not a folder")
        assert contents(tmp_path) == {"notes.txt"} and (tmp_path / "notes.txt").read_text() == "not a run"


def test_an_exception_during_training_leaves_no_run_folder(tmp_path, monkeypatch):
    """A run that fails while training writes nothing."""
    def broken(*args, **kwargs):
        raise RuntimeError("training failed")
    monkeypatch.setattr(lab.training.train, "train", broken)  # `lab run` imports it as it starts
    result = invoke(*SHORT, "--out", str(tmp_path / "run"))
    assert result.exit_code != 0 and isinstance(result.exception, RuntimeError)
    assert contents(tmp_path) == set()


def test_an_exception_while_writing_leaves_no_partial_folder_and_keeps_the_old_one(tmp_path, monkeypatch):
    """Results appear only complete; a failure mid-write leaves the previous folder as it was."""
    out = tmp_path / "run"
    assert invoke(*SHORT, "--quiet", "--out", str(out)).exit_code == 0
    earlier = (out / "metrics.csv").read_text()

    def broken_plot(*args, **kwargs):
        raise RuntimeError("plotting failed")
    monkeypatch.setattr(lab.figures.plots, "plot_run", broken_plot)
    result = invoke(*SHORT, "--quiet", "--force", "--out", str(out))
    assert isinstance(result.exception, RuntimeError)
    assert contents(tmp_path) == {"run"} and contents(out) == RUN_FILES
    assert (out / "metrics.csv").read_text() == earlier


def test_help_lists_every_option_with_help_text():
    """Every option of `lab run` has help text."""
    result = CliRunner().invoke(app, ["run", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for option in ("--delta", "--loss", "--reward", "--kl", "--kl-period", "--clip-eps", "--epochs", "--steps",
                   "--group-size", "--lr", "--dim", "--seed", "--prompts", "--device", "--out", "--force",
                   "--quiet", "--heldout", "--num-prompts", "--prompt-length", "--vocab-size"):
        assert option in text, option
    for choice in ("raw", "centered", "normalized", "max", "loo", "naive", "unclipped", "clipped", "auto", "cuda"):
        assert choice in text, choice


@pytest.mark.cuda
def test_a_short_run_on_cuda(tmp_path):
    """`--device cuda` trains on the GPU and writes the same folder."""
    out = tmp_path / "run"
    result = invoke(*SHORT, "--quiet", "--device", "cuda", "--delta", "centered", "--loss", "clipped", "--kl", "0.1",
                    "--out", str(out))
    assert result.exit_code == 0, result.output
    assert contents(out) == RUN_FILES
    assert json.loads((out / "config.json").read_text())["device"] == "cuda"
    for row in metrics_rows(out):
        assert math.isfinite(float(row["loss"])) and math.isfinite(float(row["mean_reward"]))
