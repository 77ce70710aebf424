"""A task is one file: a file dropped into tasks/ works with every command, both policies and the exact metrics, with
no other edit (issue 36: "a new task is one file").

The test adds a temporary folder to the `tasks` package's search path (what a file copied into tasks/ is to the lab:
`tasks.catalog` lists the package's folders) and writes two task files there: `copied`, tasks/reverse.py's text
unchanged under a new name, and `echo`, a task written from docs/architecture.md's protocol alone (respond with the
prompt). Nothing else is edited. Mutant tried: `tasks.catalog.task_names` reading only the package's own folder
(Path(__file__).parent): every command here then refuses `--task copied` with exit 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tasks
from lab.cli.commands import app

ROOT = Path(__file__).resolve().parents[2]
SHORT = ["--epochs", "3", "--steps", "2", "--device", "cpu"]

ECHO = '''"""Echo: respond with the prompt itself (R = [y == x], or the matching positions)."""

from tasks import Task, reward_registry
from tasks.prompts import checked_prompts
from tasks.windows import content_window, window_reference

REWARD_NAMES = ("exact-match", "distance")
DEFAULT_REWARD = "distance"
VOCAB_SIZE = 4
REWARDS, reward = reward_registry()
VARIABLE_LENGTH, variable_length = reward_registry()


@reward("exact-match")
def exact(prompts, responses):
    return (responses == prompts.unsqueeze(-2)).all(dim=-1).float()


@reward("distance")
def distance(prompts, responses):
    return (responses == prompts.unsqueeze(-2)).sum(dim=-1).float()


@variable_length("exact-match")
def exact_varlen(prompts, responses, eos):
    window, extra = content_window(prompts, responses, eos)
    return exact(prompts, window) * (extra == 0).float()


@variable_length("distance")
def distance_varlen(prompts, responses, eos):
    window, extra = content_window(prompts, responses, eos)
    return distance(prompts, window) - extra


def make_task(prompts=None, vocab_size=VOCAB_SIZE, eval_prompts=None):
    prompts, eval_prompts = checked_prompts([[0, 1, 2], [3, 3, 1]] if prompts is None else prompts, vocab_size,
                                            eval_prompts)
    return Task(name="echo", prompts=prompts, vocab_size=vocab_size, response_length=prompts.shape[1],
                rewards=REWARDS, targets=lambda p: p, eval_prompts=eval_prompts,
                variable_length_rewards=VARIABLE_LENGTH, default_reward=DEFAULT_REWARD,
                references={"exact-match": lambda x, y: float(list(y) == list(x)),
                            "distance": lambda x, y: float(sum(a == b for a, b in zip(x, y)))},
                variable_length_references={"exact-match": lambda x, y, e: float(
                    (y[:y.index(e)] if e in y else y) == list(x)),
                    "distance": lambda x, y, e: float(sum(a == b for a, b in zip(window_reference(x, y, e)[0], x))
                                                      - window_reference(x, y, e)[1])},
                solved="echoed")
'''


@pytest.fixture
def dropped_tasks(tmp_path, monkeypatch):
    """tasks/copied.py (reverse.py's text) and tasks/echo.py, found by the lab as any file in tasks/ is."""
    folder = tmp_path / "more_tasks"
    folder.mkdir()
    (folder / "copied.py").write_text((ROOT / "tasks" / "reverse.py").read_text())
    (folder / "echo.py").write_text(ECHO)
    monkeypatch.setattr(tasks, "__path__", [*tasks.__path__, str(folder)])
    monkeypatch.chdir(tmp_path)
    yield
    for name in ("tasks.copied", "tasks.echo"):
        sys.modules.pop(name, None)


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.parametrize("policy", ["factorized", "autoregressive"])
def test_a_dropped_task_file_runs_and_sweeps_with_both_policies(dropped_tasks, tmp_path, policy):
    """`lab run --task NAME` and `lab sweep --task NAME` train on the new file's prompts under its default reward,
    record its name, and report with its own word for a solved prompt; the exact per-epoch metrics are taken."""
    for name, reward, word in (("copied", "exact-match", "reversed"), ("echo", "distance", "echoed")):
        result = invoke("run", "--task", name, "--policy", policy, *SHORT, "--out", f"run-{name}-{policy}")
        assert f"prompts {word})" in result.output
        config = json.loads((tmp_path / f"run-{name}-{policy}" / "config.json").read_text())
        assert config["task"]["name"] == name and config["config"]["reward"] == reward
        assert config["prompt_options"]["task"] == name
        assert json.loads((tmp_path / f"run-{name}-{policy}" / "summary.json").read_text())["exploration_exact"]
    name = "copied" if policy == "factorized" else "echo"  # one sweep per policy: each file through both commands
    invoke("sweep", "--task", name, "--policy", policy, "--delta", "raw", "--delta", "centered", "--seeds", "2",
           *SHORT, "--format", "csv", "--out", f"sweep-{name}-{policy}", "--quiet")
    assert (tmp_path / f"sweep-{name}-{policy}" / "summary.csv").is_file()


def test_a_dropped_task_file_works_with_diagnose_and_reward_model(dropped_tasks, tmp_path):
    """`lab diagnose --task` takes the exact gradient moments on the new task; `lab reward-model --task` fits on its
    rewards; a wrong reward for it is one line naming the task's own rewards."""
    invoke("diagnose", "--task", "echo", "--group-size", "2", "--delta", "centered", "--out", "echo.png")
    invoke("reward-model", "--task", "copied", "--steps", "5", "--pairs-per-prompt", "4", "--out", "rm", "--quiet")
    assert json.loads((tmp_path / "rm" / "config.json").read_text())["task"]["name"] == "copied"
    bad = CliRunner().invoke(app, ["run", "--task", "echo", "--reward", "inclusion-ordering", *SHORT])
    assert bad.exit_code == 2 and "choose one of: exact-match, distance" in bad.output
    unknown = CliRunner().invoke(app, ["run", "--task", "nosuch", *SHORT])
    assert unknown.exit_code == 2 and "--task nosuch is not a choice" in unknown.output and "echo" in unknown.output
