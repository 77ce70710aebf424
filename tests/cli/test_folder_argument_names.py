"""Default names tell folder arguments apart (issue 34): two folders with the same last component (`a/run`, `b/run`)
give two default names, one folder named two ways (`a/run`, `./a/../a/run`, its absolute path) gives one.

    name part of a folder argument = its own name + "-" + sha256(resolved path)[:8]     (`lab.training.settings`)

Before, only the last component was used, so `--init-from b/run` was refused as "already exists" after
`--init-from a/run`, or with --force replaced it. Mutant tried: `folder_label` returning the basename alone
(each "apart" case fails).
"""

from __future__ import annotations

import os
import shutil

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.cli.reward_model_command import default_name
from lab.cli.run_command import default_run_name
from lab.cli.sweep_command import default_sweep_name
from lab.training.config import TrainConfig

FIELDS = {"init_from": {}, "demos_from": dict(loss="sft", demos="policy"),
          "pairs_from": dict(loss="dpo", kl=0.1, pairs="offline"), "reward": {}}


def config(field: str, path: str) -> TrainConfig:
    value = f"learned:{path}" if field == "reward" else path
    return TrainConfig(**{field: value, **FIELDS[field]})


def names(field: str, path: str) -> tuple[str, str]:
    """The run's and the sweep's default names for the folder argument `path`."""
    points = [config(field, path)]
    return default_run_name(points[0], {}), default_sweep_name(points, {}, 2)


@pytest.mark.parametrize("field", FIELDS)
def test_two_folders_with_the_same_last_component_give_two_names(field, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first, second = names(field, "a/run"), names(field, "b/run")
    assert first[0] != second[0] and first[1] != second[1]
    assert "run-" in first[0] and "/" not in first[0] + first[1]  # the folder's own name stays readable


@pytest.mark.parametrize("field", FIELDS)
def test_one_folder_named_two_ways_gives_one_name(field, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert names(field, "a/run") == names(field, "./a/../a/run") == names(field, str(tmp_path / "a" / "run"))


def test_reward_model_from_run_names_tell_the_folders_apart(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = lambda path: {"from_run": path, "seed": 5}  # noqa: E731
    assert default_name(settings("a/run"), {"from_run": None}) != default_name(settings("b/run"), {"from_run": None})


def test_diagnose_from_run_figures_of_two_runs_named_alike_land_apart(tmp_path, monkeypatch):
    """The default figure of `diagnose --from-run a/run` and of `b/run`: two files, not a refusal of the second."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", "--epochs", "1", "--steps", "1", "--quiet", "--out", "a/run"])
    assert result.exit_code == 0, result.output
    shutil.copytree("a/run", "b/run")
    for folder in ("a/run", "b/run"):
        result = CliRunner().invoke(app, ["diagnose", "--delta", "raw", "--group-size", "2", "--from-run", folder])
        assert result.exit_code == 0, result.output
    figures = [name for name in os.listdir("runs") if name.endswith(".png")]
    assert len(figures) == 2 and all("run-" in name for name in figures)
