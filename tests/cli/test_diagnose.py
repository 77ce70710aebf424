"""`lab diagnose` and the exact diagnostics behind it.

`lab.exact.diagnose` and `lab diagnose`: exact bias and variance of every delta mode, and one-line errors.

`lab diagnose` never answers a question it was not asked and never replaces a user's file.

A damaged or incomplete `--from-run` folder is an error naming the file and the problem (exit 2,
one line); it never falls back to the lecture's prompts. `--out` picks the format from its suffix
and replaces only a figure the lab signed.
"""

import json
import math
import os

import pytest
import torch
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.core.deltas import REWARD_MODES
from lab.exact.diagnose import DiagnoseConfig, format_table, gradient_diagnostics, objective_summary
from lab.exact.enumeration import ExactLimits
from lab.exact.estimators import gradient_moments
from lab.figures.figure_files import MARK, written_by_lab
from lab.policies.factorized import Policy, save_policy
from tasks import sorting

MC_Z = 5.0
"""Monte Carlo checks accept a deviation of at most this many standard errors (fixed seeds)."""


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def lecture():
    """The lecture's task and its policy at initialisation (seed 5, dim 10)."""
    policy = Policy(5, 3, 3, dim=10, generator=torch.Generator().manual_seed(5))
    return sorting.make_task(), policy


def test_rows_give_exact_scale_and_angle_of_every_mode(lecture):
    task, policy = lecture
    rows = gradient_diagnostics(policy, task, "inclusion-ordering", group_sizes=(2, 3, 5))
    assert [(r.delta, r.group_size) for r in rows] == [(m.value, G) for m in REWARD_MODES for G in (2, 3, 5)]
    for row in rows:
        assert row.samples == 0 and row.method in ("closed", "values")
        if row.delta in ("raw", "loo"):
            assert row.scale == pytest.approx(1, abs=1e-9) and row.angle_deg < 1e-4
        elif row.delta == "centered":
            assert row.scale == pytest.approx((row.group_size - 1) / row.group_size, abs=1e-9)
            assert row.angle_deg < 1e-4
        elif row.delta in ("normalized", "max"):  # biased, not parallel to grad J (claim 5, docs/claims.md)
            assert row.angle_deg > 0.5  # (a mode added later is held to its own test: tests/test_extensions.py)


def test_variance_is_the_batch_estimators_trace_of_covariance(lecture):
    """tr Cov of the mean over prompts of independent groups: (1/B^2) sum_b tr Cov[g_b]."""
    task, policy = lecture
    rows = gradient_diagnostics(policy, task, "distance", modes=["normalized", "loo"], group_sizes=(4,))
    for row in rows:
        per_prompt = gradient_moments(policy, task.prompts, sorting.distance_reward, row.delta, 4).trace_cov
        assert row.trace_cov == pytest.approx(float(per_prompt.sum()) / 9, rel=1e-9)
    loo = {r.group_size: r.trace_cov for r in gradient_diagnostics(policy, task, "distance", ["loo"], (2, 3, 4, 5))}
    assert all(loo[G] > loo[G + 1] for G in (2, 3, 4))  # more samples per group, less variance


def test_past_the_enumeration_limit_rows_fall_back_to_a_labelled_monte_carlo_estimate(lecture):
    """Monte Carlo rows say so; over 8 independent repetitions they agree with the exact numbers to 5 SE."""
    task, policy = lecture
    exact = gradient_diagnostics(policy, task, "inclusion-ordering", ["max"], (3,))[0]
    config = DiagnoseConfig(monte_carlo_groups=2000, limits=ExactLimits(max_enumerated=10))
    repeats = [gradient_diagnostics(policy, task, "inclusion-ordering", ["max"], (3,),
                                    generator=torch.Generator().manual_seed(k), config=config)[0] for k in range(8)]
    assert all(r.method == "monte-carlo" and r.samples == 2000 for r in repeats)
    assert "monte-carlo (2000 groups/prompt)" in format_table(repeats)
    for name in ("trace_cov", "scale"):
        values = torch.tensor([getattr(r, name) for r in repeats], dtype=torch.float64)
        standard_error = float(values.std()) / math.sqrt(len(values))
        assert abs(float(values.mean()) - getattr(exact, name)) < MC_Z * standard_error
    linear = gradient_diagnostics(policy, task, "inclusion-ordering", ["loo"], (3,), config=config)[0]
    assert linear.method == "closed"  # closed forms never need the fallback


def test_bad_modes_and_group_sizes_are_refused(lecture):
    task, policy = lecture
    with pytest.raises(ValueError, match="unknown delta mode"):
        gradient_diagnostics(policy, task, "distance", ["median"])
    with pytest.raises(ValueError, match="at least 2"):
        gradient_diagnostics(policy, task, "distance", ["centered"], (1,))
    with pytest.raises(ValueError, match=">= 1"):
        gradient_diagnostics(policy, task, "distance", ["raw"], (0,))
    with pytest.raises(ValueError, match="unknown reward"):
        gradient_diagnostics(policy, task, "nonsense")
    for mode, reason in (("batch", "whole batch's standard deviation"), ("gae", "learned critic")):
        with pytest.raises(ValueError, match=reason):
            gradient_diagnostics(policy, task, "distance", [mode])


@pytest.mark.parametrize("mode", ["batch", "gae"])
def test_the_modes_that_are_not_one_groups_are_refused_in_one_line(tmp_path, mode):
    """`--delta batch` is one of --delta's choices; it used to end in an IndexError traceback (its std reads every
    prompt's group, which one group's moments do not hold). The line names the modes that are covered."""
    result = invoke("--delta", mode, "--out", str(tmp_path / "v.png"))
    assert_one_line_error(result, f"'{mode}'", ", ".join(m.value for m in REWARD_MODES))
    assert not (tmp_path / "v.png").exists()


def test_objective_summary_reports_the_exact_expected_reward(lecture):
    task, policy = lecture
    summary = objective_summary(policy, task, "distance")
    assert len(summary["expected_reward"]) == 3 and summary["grad_norm"] > 0
    assert 0 < min(summary["expected_reward"]) and max(summary["expected_reward"]) < 3


def invoke(*args: str):
    return CliRunner().invoke(app, ["diagnose", *args])


def assert_one_line_error(result, *fragments: str):
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0]


def test_cli_prints_the_table_and_saves_the_figure_atomically(tmp_path):
    result = invoke("--delta", "loo", "--delta", "normalized", "--group-size", "2", "--group-size", "3",
                    "--out", str(tmp_path / "figs" / "v.png"))
    assert result.exit_code == 0, result.output
    table = [line for line in result.output.splitlines() if line.startswith(("loo", "normalized"))]
    assert len(table) == 4
    assert table[0].split()[:3] == ["loo", "2", "1.0000"]
    assert (tmp_path / "figs" / "v.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.listdir(tmp_path / "figs")) == [".v.png.lab-output", "v.png"]  # the mark; no temporary file


def test_cli_default_figure_path_names_the_setting():
    result = invoke("--delta", "raw", "--group-size", "2", "--reward", "distance")
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir("runs")) == [".diagnose-distance-lecture-init-seed5-dim10.png.lab-output",
                                          "diagnose-distance-lecture-init-seed5-dim10.png"]


def test_cli_from_run_diagnoses_the_saved_policy(tmp_path, lecture):
    task, _ = lecture
    trained = Policy(5, 3, 3, dim=4, generator=torch.Generator().manual_seed(9))
    (tmp_path / "myrun").mkdir()
    save_policy(trained, tmp_path / "myrun" / "policy.pt")
    result = invoke("--from-run", str(tmp_path / "myrun"), "--prompts", "lecture", "--delta", "max",
                    "--group-size", "3", "--out", str(tmp_path / "f.png"))
    assert result.exit_code == 0, result.output
    assert "policy myrun" in result.output
    expected = gradient_diagnostics(trained, task, "inclusion-ordering", ["max"], (3,))[0]
    row = next(line for line in result.output.splitlines() if line.startswith("max"))
    assert float(row.split()[2]) == pytest.approx(expected.scale, abs=1e-4)


def test_cli_from_run_errors_are_one_line(tmp_path):
    assert_one_line_error(invoke("--from-run", str(tmp_path / "missing")), "no such run folder")
    (tmp_path / "empty").mkdir()
    assert_one_line_error(invoke("--from-run", str(tmp_path / "empty")), "no policy.pt")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "policy.pt").write_text("not a policy")
    assert_one_line_error(invoke("--from-run", str(tmp_path / "broken")), "cannot read policy.pt")
    (tmp_path / "other").mkdir()
    save_policy(Policy(4, 3, 3, dim=4), tmp_path / "other" / "policy.pt")
    assert_one_line_error(invoke("--from-run", str(tmp_path / "other"), "--prompts", "lecture"), "(4, 3, 3)",
                          "(5, 3, 3)")
    assert not os.path.exists("runs")  # nothing written on an error


@pytest.mark.parametrize("args, fragment", [
    (["--delta", "centered", "--group-size", "1"], "at least 2"),
    (["--group-size", "0"], ">= 1"),
    (["--prompts", "random", "--prompt-length", "6"], "4096"),
    (["--delta", "median"], "--delta"),
    (["--prompts", "[[1,2],[3]]"], "different lengths"),
])
def test_cli_bad_settings_are_one_line_errors(args, fragment):
    assert_one_line_error(invoke(*args), fragment)
    assert not os.path.exists("runs")


def test_cli_from_run_uses_the_prompts_the_run_was_trained_on(tmp_path):
    """A run trained on its own prompts is diagnosed on them, without repeating --prompts."""
    folder = tmp_path / "custom"
    trained = CliRunner().invoke(app, ["run", "--prompts", "[[3,1,0,2],[2,2,0,1]]", "--vocab-size", "4",
                                       "--epochs", "2", "--steps", "2", "--out", str(folder), "--quiet"])
    assert trained.exit_code == 0, trained.output
    result = invoke("--from-run", str(folder), "--delta", "raw", "--group-size", "2", "--out", str(tmp_path / "f.png"))
    assert result.exit_code == 0, result.output
    per_prompt = result.output.split("exact J per prompt [", 1)[1].split("]", 1)[0].split(", ")
    assert len(per_prompt) == 2  # the run's two prompts, not the lecture's three


FAST = ["--delta", "raw", "--group-size", "2"]


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A real `lab run` folder on two custom prompts (so a fallback to the lecture's three would show)."""
    folder = tmp_path_factory.mktemp("runs") / "custom"
    result = CliRunner().invoke(app, ["run", "--prompts", "[[3,1,0,2],[2,2,0,1]]", "--vocab-size", "4",
                                      "--epochs", "1", "--steps", "1", "--out", str(folder), "--quiet"])
    assert result.exit_code == 0, result.output
    return folder


def diagnose(*args):
    return CliRunner().invoke(app, ["diagnose", *FAST, *args])


def one_line_error(result, *fragments):
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def damaged_copy(source, tmp_path, config) -> str:
    """A copy of the run folder whose config.json holds `config` (text as is, else JSON)."""
    folder = tmp_path / "damaged"
    folder.mkdir()
    for name in ("policy.pt", "summary.json"):
        (folder / name).write_bytes((source / name).read_bytes())
    (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return str(folder)


GOOD_TASK = {"name": "sorting", "prompts": [[3, 1, 0, 2], [2, 2, 0, 1]], "vocab_size": 4}


@pytest.mark.parametrize("config, fragments", [
    ('{"task": {"name": "sorting", ', ("config.json", "not valid JSON")),
    ({"command": "run"}, ("config.json", 'no "task"')),
    ({"task": {k: v for k, v in GOOD_TASK.items() if k != "prompts"}}, ("config.json", 'no "prompts"')),
    ({"task": {**GOOD_TASK, "vocab_size": "4"}}, ("config.json", '"vocab_size" must be an integer')),
    ({"task": {**GOOD_TASK, "prompts": [[3, 1, 0, "2"]]}}, ("config.json", "integer lists")),
    ({"task": {**GOOD_TASK, "prompts": [[3, 1, 0, 9]]}}, ("config.json", "must lie in 0..3")),
    ({"task": {**GOOD_TASK, "prompts": [[3, 1, 0]]}}, ("policy.pt", "(4, 4, 4)", "(4, 3, 3)")),
], ids=["bad-json", "no-task", "missing-key", "wrong-type", "bad-token-type", "token-outside-vocab",
        "shape-mismatch"])
def test_a_damaged_run_folder_is_an_error_naming_the_file_never_the_lectures_prompts(
        run_folder, tmp_path, config, fragments):
    """A damaged config.json is refused, naming it; diagnose never falls back to the lecture's prompts."""
    one_line_error(diagnose("--from-run", damaged_copy(run_folder, tmp_path, config)), *fragments)
    assert not os.path.exists("runs")  # nothing written


def test_a_run_folder_without_config_needs_prompts_named(run_folder, tmp_path):
    folder = tmp_path / "bare"
    folder.mkdir()
    (folder / "policy.pt").write_bytes((run_folder / "policy.pt").read_bytes())
    one_line_error(diagnose("--from-run", str(folder)), "config.json", "--prompts")
    given = diagnose("--from-run", str(folder), "--prompts", "[[3,1,0,2]]", "--vocab-size", "4")
    assert given.exit_code == 0, given.output  # the user said which prompts: no guess involved


def test_a_diverged_run_has_no_policy_to_diagnose(tmp_path):
    folder = tmp_path / "diverged"
    result = CliRunner().invoke(app, ["run", "--lr", "10", "--steps", "50", "--kl", "0.05", "--epochs", "2",
                                      "--out", str(folder), "--quiet"])
    assert result.exit_code == 3, result.output
    one_line_error(diagnose("--from-run", str(folder)), "summary.json", "diverged")


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".pdf", b"%PDF"), (".svg", b"<?xml")])
def test_the_figure_format_follows_the_suffix_and_carries_the_labs_mark(tmp_path, suffix, magic):
    """`diagnose --out x.pdf` used to write PNG bytes."""
    out = tmp_path / f"variance{suffix}"
    result = diagnose("--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(magic) and written_by_lab(out)
    assert diagnose("--out", str(out)).exit_code == 0  # the lab's own figure is replaced
    assert sorted(os.listdir(tmp_path)) == [f".{out.name}.lab-output", out.name]


def test_an_unknown_suffix_is_refused_listing_the_allowed_ones(tmp_path):
    one_line_error(diagnose("--out", str(tmp_path / "v.jpg")), ".png, .pdf, .svg")
    assert os.listdir(tmp_path) == []


def test_a_users_file_is_never_replaced(tmp_path):
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"\x89PNG my own figure")
    one_line_error(diagnose("--out", str(mine)), "not a figure lab diagnose wrote")
    assert mine.read_bytes() == b"\x89PNG my own figure"
    (tmp_path / "folder.png").mkdir()
    one_line_error(diagnose("--out", str(tmp_path / "folder.png")), "folder")
    assert MARK not in mine.read_text(errors="replace")


@pytest.mark.parametrize("args, fragment", [
    (["--dim", "0"], "--dim must be a positive integer"),
    (["--seed", str(10**23)], "--seed must be an integer"),
    (["--dim", "100000"], "needs about"),
    (["--group-size", "100000000"], "needs about"),
])
def test_bad_sizes_are_one_line_errors_not_crashes(args, fragment):
    """`diagnose --dim 0` used to raise ZeroDivisionError; a huge --dim or G an allocation traceback or a hang."""
    one_line_error(CliRunner().invoke(app, ["diagnose", *args]), fragment)
    assert not os.path.exists("runs")


def test_from_run_diagnoses_under_the_runs_own_reward(tmp_path):
    """A `--reward distance` run used to be diagnosed under inclusion-ordering without a word."""
    folder = tmp_path / "distance"
    assert CliRunner().invoke(app, ["run", "--reward", "distance", "--epochs", "1", "--steps", "1",
                                    "--out", str(folder), "--quiet"]).exit_code == 0
    result = diagnose("--from-run", str(folder), "--out", str(tmp_path / "d.png"))
    assert result.exit_code == 0, result.output
    assert "; distance reward;" in result.output
    asked = diagnose("--from-run", str(folder), "--reward", "inclusion-ordering", "--out", str(tmp_path / "i.png"))
    assert "; inclusion-ordering reward;" in asked.output  # what the user names explicitly still wins


def test_a_policy_from_another_run_dropped_into_a_run_folder_is_refused(tmp_path):
    """policy.pt of a --dim 4 run copied into a dim-10 run's folder: the folder's .lab-output no longer vouches
    for it, so diagnose names the file instead of diagnosing a policy the folder does not describe."""
    for name, dim in (("small", "4"), ("big", "10")):
        assert CliRunner().invoke(app, ["run", "--dim", dim, "--epochs", "1", "--steps", "1",
                                        "--out", str(tmp_path / name), "--quiet"]).exit_code == 0
    assert diagnose("--from-run", str(tmp_path / "big"), "--out", str(tmp_path / "ok.png")).exit_code == 0
    (tmp_path / "big" / "policy.pt").write_bytes((tmp_path / "small" / "policy.pt").read_bytes())
    one_line_error(diagnose("--from-run", str(tmp_path / "big")), "policy.pt", "sha256")
    assert not os.path.exists("runs")


def test_a_task_other_than_the_runs_own_is_refused_with_from_run(tmp_path):
    """`--from-run` diagnoses the run's own task and prompts; a different `--task` beside it was silently ignored."""
    run = tmp_path / "reverse-run"
    assert CliRunner().invoke(app, ["run", "--task", "reverse", "--epochs", "2", "--steps", "1", "--quiet",
                                    "--out", str(run)]).exit_code == 0
    result = invoke("--from-run", str(run), "--task", "permutation", "--out", str(tmp_path / "d.png"))
    assert_one_line_error(result, "--task permutation", "(reverse)")
    assert not (tmp_path / "d.png").exists()
    assert invoke("--from-run", str(run), "--task", "reverse", "--out", str(tmp_path / "d.png")).exit_code == 0

