"""A run's and a sweep's folder name, a sweep's config.json and its table columns come from one list of settings.

Two sweeps that differed only in `--critic-lr` (or `--cliprange-value`, `--critic-warmup`,
`--whiten-advantages`, `--pairs-per-prompt`, `--format`) used to land in one folder, and their config.json said
`"critic_lr": null` although the value was applied. Names use the options as typed (`group-size1`, not
`group_size1` beside `initscale0.1`), and a DPO run's name has no delta (DPO uses none).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.cli.run_command import default_run_name
from lab.files.tables import read_table
from lab.training.config import TrainConfig
from lab.training.settings import name_parts, shared_and_swept, table_fields

SWEEP = ["sweep", "--epochs", "2", "--steps", "1", "--seeds", "1", "--quiet"]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def lab(*args: str):
    return CliRunner().invoke(app, list(args))


@dataclass(frozen=True)
class WithDummy(TrainConfig):
    """TrainConfig with one more field, as a new option would add it."""

    dummy: float = 0.0


def test_a_new_field_shows_in_the_name_the_config_and_the_columns_with_no_other_edit():
    """The dummy field set apart from its default (one value, then two): in the name, in config.json's
    base or grid, and a table column; at its default it stays out of the name."""
    one = [WithDummy(dummy=0.5, seed=s) for s in range(2)]
    assert "dummy0.5" in name_parts(one)
    assert shared_and_swept(one)[0]["dummy"] == 0.5 and "dummy" in table_fields(one)
    two = [WithDummy(dummy=d) for d in (0.5, 0.7)]
    assert "dummy0.5+0.7" in name_parts(two)
    assert shared_and_swept(two)[1]["dummy"] == [0.5, 0.7] and "dummy" in table_fields(two)
    assert not any(part.startswith("dummy") for part in name_parts([WithDummy()]))


def test_names_use_the_options_as_typed_and_dpo_has_no_delta():
    config = TrainConfig(group_size=1, init_scale=0.1, loss_agg="seq-mean-token-mean", kl_period=0)
    assert default_run_name(config) == ("raw-naive-inclusion-ordering-group-size1-kl-period0-init-scale0.1-"
                                        "loss-aggseq-mean-token-mean-seed5")
    assert default_run_name(TrainConfig(loss="dpo", kl=0.1)) == "dpo-inclusion-ordering-kl0.1-seed5"
    assert default_run_name(TrainConfig(delta="gae", whiten_advantages=True)) == \
        "gae-naive-inclusion-ordering-whiten-advantages-seed5"
    assert default_run_name(TrainConfig(), {"vocab_size": 7, "prompt_seed": 2, "heldout": 3}) == \
        "raw-naive-inclusion-ordering-vocab-size7-heldout3-prompt-seed2-seed5"


@pytest.mark.parametrize("extra, field, value", [
    (["--critic-lr", "0.01"], "critic_lr", 0.01),
    (["--cliprange-value", "0.2"], "cliprange_value", 0.2),
    (["--critic-warmup", "1"], "critic_warmup", 1),
    (["--whiten-advantages"], "whiten_advantages", True),
])
def test_a_sweeps_critic_options_are_in_its_name_config_and_tables(extra, field, value):
    base = [*SWEEP, "--delta", "gae", "--delta", "raw"]
    assert lab(*base).exit_code == 0
    result = lab(*base, *extra)
    assert result.exit_code == 0, result.output
    folders = sorted(os.listdir("runs"))
    assert len(folders) == 2, folders
    mine = Path("runs") / next(f for f in folders if field.replace("_", "-") in f)
    config = json.loads((mine / "config.json").read_text())
    recorded = config["base"].get(field, config["grid"].get(field))
    assert value in (recorded if isinstance(recorded, list) else [recorded]), config
    if field != "critic_warmup":  # a batch's schedule, the same for every run: config.json only
        assert (f"config_{field}") in read_table(mine / "metrics_epoch.parquet")


def test_a_dpo_sweeps_pairs_per_prompt_and_the_format_are_in_its_name():
    dpo = [*SWEEP, "--loss", "dpo", "--kl", "0.1", "--pairs", "offline"]
    for extra in ([], ["--pairs-per-prompt", "3"], ["--format", "csv"]):
        result = lab(*dpo, *extra)
        assert result.exit_code == 0, result.output
    folders = sorted(os.listdir("runs"))
    assert len(folders) == 3 and all(f.startswith("sweep-dpo-inclusion-ordering-") for f in folders), folders
    three = Path("runs") / next(f for f in folders if "pairs-per-prompt3" in f)
    assert json.loads((three / "config.json").read_text())["base"]["pairs_per_prompt"] == 3
