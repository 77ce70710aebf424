"""A sweep's tables carry every setting its folder name shows (issue 34): `critic_warmup`, `pairs_per_prompt`,
`kl_period`, `init_from`, `demos_from` and `demo_noise` were in config.json and the name, with no `config_*` column.

    config_<field> in the tables  <=>  some run sets the field apart from its default (`table_fields`), a batch's
                                       shape or schedule (epochs, steps, dim, ...) and the sha256 of a folder read
                                       excepted (config.json's "base" holds them)

Mutant tried: `TABLED_SHARED` emptied (each of the six cases fails).
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from lab.cli.commands import app
from lab.files.tables import read_table
from lab.training.config import TrainConfig
from lab.training.settings import name_parts, table_fields

SET_APART = {
    "critic_warmup": dict(delta="gae", critic_warmup=3),
    "pairs_per_prompt": dict(loss="dpo", kl=0.1, pairs="offline", pairs_per_prompt=4),
    "kl_period": dict(kl_period=3),
    "init_from": dict(init_from="runs/start", init_sha256="0" * 64),
    "demos_from": dict(loss="sft", demos="policy", demos_from="runs/start"),
    "demo_noise": dict(loss="sft", demos="noisy", demo_noise=0.3),
}


@pytest.mark.parametrize("field", SET_APART)
def test_a_setting_the_name_shows_is_a_table_column(field):
    configs = [TrainConfig(seed=seed, **SET_APART[field]) for seed in (0, 1)]
    assert any(part.startswith(field.replace("_", "-")) for part in name_parts(configs))
    assert field in table_fields(configs)


@pytest.mark.parametrize("field", ["epochs", "steps", "dim", "init_sha256"])
def test_a_batch_shape_or_a_sha256_stays_in_config_json_only(field):
    configs = [TrainConfig(epochs=3, steps=2, dim=4, init_from="runs/start", init_sha256="0" * 64)]
    assert field not in table_fields(configs)


def test_the_sweep_table_has_the_column(tmp_path):
    result = CliRunner().invoke(app, ["sweep", "--epochs", "2", "--steps", "1", "--seeds", "1", "--kl", "0.1",
                                      "--kl-period", "1", "--format", "csv", "--quiet", "--out", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert set(read_table(tmp_path / "s" / "metrics_epoch.csv")["config_kl_period"].tolist()) == {1}
