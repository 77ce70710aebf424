"""Every numeric option is bounded before any arithmetic that can overflow, hang or allocate.

Integers past about 310 digits used to raise OverflowError in the memory estimate (18 places);
`--pairs-per-prompt 99999999999` an allocator traceback; a 30,000-token prompt a 90 GB allocation;
`diagnose --prompts random --prompt-length 99999999999` computed 5**99999999999; `bench --repeats` had no
limit; a name past 255 bytes (diagnose, reproduce) or a path past 4096 (run) raised Errno 36; `--from-run`
parsed a run folder's JSON before checking its mark, and took a NaN policy or `"config": 5` silently.
Each now ends in one line, exit 2, that names the option (or the file and field), before any work.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.files.output_folders import MARKER
from lab.training.bounds import capped_power
from tests.cli.cli_tools import one_line

HUGE = str(10**400)
QUICK = ["--epochs", "1", "--steps", "1", "--quiet"]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


RANDOM = ["--prompts", "random"]
HUGE_CASES = [
    *((["run", option, HUGE], option) for option in ("--epochs", "--steps", "--group-size", "--dim", "--vocab-size")),
    (["run", "--policy", "autoregressive", "--max-length", HUGE], "--max-length"),
    (["run", *RANDOM, "--num-prompts", HUGE], "--num-prompts"),
    (["run", *RANDOM, "--prompt-length", HUGE], "--prompt-length"),
    (["run", "--loss", "dpo", "--kl", "0.1", "--pairs", "offline", "--pairs-per-prompt", HUGE], "--pairs-per-prompt"),
    (["run", "--loss", "dpo", "--kl", "0.1", "--pairs", "offline", "--pairs-per-prompt", "99999999999"],
     "--pairs-per-prompt"),
    *((["sweep", option, HUGE], option) for option in ("--seeds", "--group-size", "--epochs")),
    (["sweep", "--policy", "autoregressive", "--max-length", HUGE], "--max-length"),
    (["bench", "--runs", HUGE], "--runs"),
    (["bench", "--runs", "1", "--sweep-runs", HUGE], "--sweep-runs"),
    (["bench", "--repeats", "99999999999"], "--repeats"),
    *((["diagnose", option, HUGE], option) for option in ("--group-size", "--dim", "--vocab-size")),
    (["diagnose", *RANDOM, "--prompt-length", "99999999999"], "--prompt-length"),
    (["reproduce", "--seeds", HUGE, "--out", "figs"], "--seeds"),
    (["run", "--heldout", "99999999999"], "--heldout"),
    (["run", *RANDOM, "--prompt-length", "99999999999"], "--prompt-length"),
]


WORK = ("randn", "rand", "randint", "randperm", "normal", "empty", "zeros")
"""torch's constructors that any training, sampling, bench or prompt draw calls first: the checks must come before."""


@pytest.mark.parametrize("args, option", HUGE_CASES, ids=[" ".join(a[:2] + [o]) for a, o in HUGE_CASES])
def test_a_huge_count_is_one_line_naming_its_option_before_any_work(args, option, monkeypatch):
    """No tensor is drawn or allocated before the refusal (each constructor raises if called: a check moved after
    the work shows as a traceback, not a one-line exit 2), and nothing is written."""
    def work(*_args, **_kwargs):
        raise AssertionError("work started before the counts were checked")

    for name in WORK:
        monkeypatch.setattr(torch, name, work)
    line = one_line(cli(*args), 2, option)
    assert len(line) < 400, line
    assert not os.path.exists("runs") and not os.path.exists("figs")


@pytest.mark.parametrize("length, group", [(30_000, 100), (30_000, 10), (100_000, 10)])
def test_a_long_prompt_is_refused_by_the_memory_check(length, group, monkeypatch):
    """The reward compares every prompt token with every response token: G x length^2 bytes, now estimated."""
    import lab.training.limits as limits
    monkeypatch.setattr(limits, "available_memory", lambda: 16 * 10**9)  # a 16 GB machine
    prompt = json.dumps([list(range(5)) * (length // 5)])
    one_line(cli("run", "--prompts", prompt, "--group-size", str(group), *QUICK), 2, "needs about")


def test_an_integer_power_of_user_input_is_never_computed():
    assert capped_power(5, 99_999_999_999, 10**6) == 10**6 + 1 and capped_power(5, 3, 10**6) == 125
    assert capped_power(1, 10**12, 7) == 1 and capped_power(0, 3, 7) == 0 and capped_power(7, 0, 7) == 1


@pytest.mark.parametrize("command", [["diagnose", "--group-size", "2", "--out"], ["reproduce", "--out"],
                                     ["run", *QUICK, "--out"], ["sweep", *QUICK, "--seeds", "1", "--out"]])
@pytest.mark.parametrize("path, words", [("n" * 300 + ".png", "bytes long"),
                                         ("/".join(["d" * 200] * 25) + "/x.png", "path is")])
def test_every_out_name_is_checked_against_the_file_systems_limits(command, path, words):
    """255 bytes a name, 4096 a path: reported as one line, not Errno 36."""
    one_line(cli(*command, path), 2, words)
    assert os.listdir(".") == []


def test_out_through_a_file_is_refused_before_training():
    """`--out f/../r` with f a file used to train first, then fail with exit 1."""
    Path("f").write_text("mine")
    one_line(cli("run", *QUICK, "--out", "f/../r"), 2, "f is a file")
    assert os.listdir(".") == ["f"]


@pytest.fixture
def run_folder(tmp_path) -> Path:
    assert cli("run", *QUICK, "--out", "r").exit_code == 0
    return Path("r")


def test_from_run_checks_the_mark_before_parsing_json(run_folder):
    """A deeply nested summary.json in a marked folder: refused by its sha256, not a RecursionError."""
    (run_folder / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    one_line(cli("diagnose", "--from-run", str(run_folder)), 2, "summary.json", "sha256")
    os.remove(run_folder / MARKER)  # the user's own assembly: read as it is, still one line
    one_line(cli("diagnose", "--from-run", str(run_folder)), 2, "summary.json", "nested deeper")


@pytest.mark.parametrize("config, fragments", [(5, ('"config" must be an object',)),
                                               ({"reward": "bogus"}, ('"config"."reward"', "bogus"))])
def test_from_run_refuses_a_config_of_the_wrong_type_naming_file_and_field(run_folder, config, fragments):
    """`"config": 5` used to fall back to the default reward; `"reward": "bogus"` did not name the file."""
    os.remove(run_folder / MARKER)
    data = json.loads((run_folder / "config.json").read_text())
    (run_folder / "config.json").write_text(json.dumps({**data, "config": config}))
    one_line(cli("diagnose", "--from-run", str(run_folder)), 2, "config.json", *fragments)


def test_from_run_refuses_a_policy_that_is_not_finite(run_folder):
    """A NaN policy.pt used to print a table of NaN, exit 0."""
    from lab.policies import load_policy
    from lab.policies.factorized import save_policy
    os.remove(run_folder / MARKER)
    policy = load_policy(run_folder / "policy.pt")
    with torch.no_grad():
        next(policy.parameters())[0, 0] = float("nan")
    save_policy(policy, run_folder / "policy.pt")
    one_line(cli("diagnose", "--from-run", str(run_folder)), 2, "policy.pt", "NaN or inf")
